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
func kernelSubscribe(done <-chan struct{}) (Subscription, error) { return subscribeKernel(done, false) }

// kernelSubscribeRoutes subscribes to link and route notifications, for the route binding:
// the proxy's local routes (RouteProtocol, local table) that are deleted.
func kernelSubscribeRoutes(done <-chan struct{}) (Subscription, error) {
	return subscribeKernel(done, true)
}

func subscribeKernel(done <-chan struct{}, routeBinding bool) (Subscription, error) {
	stop := make(chan struct{})
	addrs := make(chan netlink.AddrUpdate, 1024)
	routes := make(chan netlink.RouteUpdate, 1024)
	links := make(chan netlink.LinkUpdate, 64)
	var err error
	if routeBinding {
		err = netlink.RouteSubscribeWithOptions(routes, stop, netlink.RouteSubscribeOptions{
			ReceiveBufferSize: notificationBuffer, ReceiveBufferForceSize: true})
	} else {
		err = netlink.AddrSubscribeWithOptions(addrs, stop, netlink.AddrSubscribeOptions{
			ReceiveBufferSize: notificationBuffer, ReceiveBufferForceSize: true})
	}
	if err != nil {
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
			if routeBinding {
				go func() {
					for range routes {
					}
				}()
			}
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
			case u, ok := <-routes:
				if !ok {
					return
				}
				if u.Protocol != RouteProtocol || u.Table != unix.RT_TABLE_LOCAL || u.Dst == nil {
					continue
				}
				ip, _ := netip.AddrFromSlice(u.Dst.IP)
				ev = Event{Route: true, Deleted: u.Type == unix.RTM_DELROUTE, LinkIndex: u.LinkIndex, Addr: ip.Unmap()}
			case u, ok := <-links:
				if !ok {
					return
				}
				ev = Event{Link: true, Deleted: u.Header.Type == unix.RTM_DELLINK, Down: u.Flags&unix.IFF_UP == 0,
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
