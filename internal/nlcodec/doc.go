// Package nlcodec is the netlink message codec that packages ipvs (generic netlink) and
// ipset (nfnetlink) share: it appends netlink headers and attributes to a byte slice, and
// walks messages and attributes in place with every length checked.
//
// Why its own package, and why internal: both kernel packages need the same wire format,
// and neither should import the other for it; vishvananda/netlink's nl.RtAttr builds a tree
// of objects and copies it on Serialize, and its parsers allocate a slice per read, where a
// cold start writes hundreds of thousands of attributes and reads tens of thousands of
// dumps. The sockets and the generic netlink family lookup are vishvananda/netlink's; only
// the encoding and decoding live here. It is internal because it is plumbing of this
// module, not an API anyone outside should build on.
//
// Encoding never fails (the caller controls the input). Decoding never panics: a truncated
// or malformed message or attribute is an error that names what was wrong.
package nlcodec
