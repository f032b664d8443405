/*
 * A GNU make plugin with one function, $(kipvs-exit N), that ends make with exit status N.
 *
 * make by itself exits only 0, 1 or 2, but `make guest-run SCRIPT=x.sh` promises the
 * script's own exit status. The Makefile loads this plugin (built on first use), runs the
 * scenario while it parses, and leaves through this function with the scenario's status.
 */
#include <gnumake.h>
#include <stdio.h>
#include <stdlib.h>

int plugin_is_GPL_compatible;

static char *kipvs_exit(const char *name, unsigned int argc, char **argv)
{
	(void)name;
	(void)argc;
	fflush(NULL);
	exit(atoi(argv[0]));
}

int kipvs_exit_gmk_setup(const gmk_floc *floc)
{
	(void)floc;
	gmk_add_function("kipvs-exit", kipvs_exit, 1, 1, GMK_FUNC_DEFAULT);
	return 1;
}
