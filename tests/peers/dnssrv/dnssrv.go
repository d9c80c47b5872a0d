// Package dnssrv is a test peer: a local authoritative DNS server for one
// zone whose SRV name _comfyui._tcp.<zone> lists the ports it is given,
// each on the target w.<zone>, whose A record is 127.0.0.1. It stands in
// for the DNS a platform publishes a ComfyUI fleet in (Kubernetes headless
// services, Consul), so that tests can add and remove workers by DNS.
package dnssrv

import (
	"net"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Server is a running DNS server.
type Server struct {
	// Addr is its UDP address, the pool's resolver.
	Addr string
	// Name is the SRV name it serves, without the final dot.
	Name string

	target string
	mu     sync.Mutex
	ports  []int
}

// Start serves zone until the test ends, its SRV name listing ports.
func Start(t testing.TB, zone string, ports ...int) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Addr: pc.LocalAddr().String(), Name: "_comfyui._tcp." + zone, target: "w." + zone + ".", ports: ports}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve)}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return s
}

// Set replaces the ports the SRV name lists.
func (s *Server) Set(ports ...int) {
	s.mu.Lock()
	s.ports = ports
	s.mu.Unlock()
}

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	for _, q := range req.Question {
		switch {
		case q.Name == s.Name+"." && q.Qtype == dns.TypeSRV:
			s.mu.Lock()
			for _, port := range s.ports {
				m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 1},
					Priority: 10, Weight: 10, Port: uint16(port), Target: s.target})
			}
			s.mu.Unlock()
		case q.Name == s.target && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
				A: net.IPv4(127, 0, 0, 1)})
		case q.Name == s.target:
			// no AAAA: an empty answer
		default:
			m.Rcode = dns.RcodeNameError
		}
	}
	_ = w.WriteMsg(m)
}
