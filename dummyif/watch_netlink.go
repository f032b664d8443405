package dummyif

import (
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// notificationBuffer is the receive buffer of the notification sockets: binding tens of
// thousands of addresses at a cold start sends as many notifications at once, and a buffer
// that overflows costs a re-subscription and a listing of every address.
const notificationBuffer = 16 << 20

// kernelSubscribe subscribes to the current network namespace's link and address
// notifications (vishvananda/netlink's LinkSubscribe and AddrSubscribe). The subscription
// ends, closing Events, when either socket fails (a buffer overrun, say) or done closes.
func kernelSubscribe(done <-chan struct{}) (Subscription, error) {
	stop := make(chan struct{})
	addrs := make(chan netlink.AddrUpdate, 1024)
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{
		ReceiveBufferSize: notificationBuffer, ReceiveBufferForceSize: true}); err != nil {
		close(stop)
		return Subscription{}, err
	}
	if err := netlink.LinkSubscribeWithOptions(links, stop, netlink.LinkSubscribeOptions{
		ReceiveBufferSize: notificationBuffer, ReceiveBufferForceSize: true}); err != nil {
		close(stop)
		return Subscription{}, err
	}
	events := make(chan Event, 1024)
	go func() {
		defer close(events)
		defer func() {
			close(stop)
			// The library's readers may be blocked handing over an update: let them
			// finish, so that they see their socket closed and end.
			go func() {
				for range addrs {
				}
			}()
			go func() {
				for range links {
				}
			}()
		}()
		for {
			var ev Event
			select {
			case <-done:
				return
			case u, ok := <-addrs:
				if !ok {
					return
				}
				ip, _ := netip.AddrFromSlice(u.LinkAddress.IP)
				ev = Event{Deleted: !u.NewAddr, LinkIndex: u.LinkIndex, Addr: ip.Unmap()}
			case u, ok := <-links:
				if !ok {
					return
				}
				ev = Event{Link: true, Deleted: u.Header.Type == unix.RTM_DELLINK,
					LinkIndex: int(u.Index), LinkName: u.Attrs().Name}
			}
			select {
			case events <- ev:
			case <-done:
				return
			}
		}
	}()
	return Subscription{Events: events}, nil
}
