package dataplane

import "errors"

// joinErr joins two errors, keeping a lone one as it is (so errors.Is and the message stay
// simple when only one step failed).
func joinErr(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return errors.Join(a, b)
}
