package chaos

import (
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// DNSName is the SRV name of the ComfyUI workers when the stack takes
// them from DNS (StackOptions.DNS): each record targets w.chaos.test
// (127.0.0.1) on one worker proxy's port.
const DNSName = "_comfyui._tcp.chaos.test"

// DNS is a local authoritative server for chaos.test.
type DNS struct {
	Addr  string
	mu    sync.Mutex
	ports []int
}

// StartDNS serves DNSName with ports until the test ends.
func StartDNS(t testing.TB, ports ...int) *DNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{Addr: pc.LocalAddr().String(), ports: ports}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(d.serve)}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return d
}

// Set replaces the ports the SRV name lists.
func (d *DNS) Set(ports ...int) {
	d.mu.Lock()
	d.ports = ports
	d.mu.Unlock()
}

func (d *DNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		switch {
		case q.Name == DNSName+"." && q.Qtype == dns.TypeSRV:
			d.mu.Lock()
			for _, port := range d.ports {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 1},
					Priority: 10, Weight: 10, Port: uint16(port), Target: "w.chaos.test."})
			}
			d.mu.Unlock()
		case q.Name == "w.chaos.test." && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
				A: net.IPv4(127, 0, 0, 1)})
		case q.Name == "w.chaos.test.":
		default:
			m.Rcode = dns.RcodeNameError
		}
	}
	_ = w.WriteMsg(m)
}

// workersDNS is the pool's workers block for a DNS source at resolver.
func workersDNS(resolver string) string {
	return fmt.Sprintf("\t\t\tworkers dns %s {\n\t\t\t\tresolver %s\n\t\t\t\trefresh 200ms\n\t\t\t}\n", DNSName, resolver)
}
