package comfyui

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zone answers a fixed set of records; names it does not know are
// NXDOMAIN, and broken.test fails (SERVFAIL).
func zone(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(name string, typ uint16) dns.RR_Header {
		return dns.RR_Header{Name: name, Rrtype: typ, Class: dns.ClassINET, Ttl: 1}
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		switch {
		case q.Name == "broken.test.":
			m.Rcode = dns.RcodeServerFailure
		case q.Name == "two.test." && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: hdr(q.Name, dns.TypeA), A: net.IPv4(10, 0, 0, 2)},
				&dns.A{Hdr: hdr(q.Name, dns.TypeA), A: net.IPv4(10, 0, 0, 1)}}
		case q.Name == "two.test." && q.Qtype == dns.TypeAAAA:
			m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr(q.Name, dns.TypeAAAA), AAAA: net.ParseIP("fd00::1")}}
		case q.Name == "two.test.":
		case q.Name == "_comfyui._tcp.test." && q.Qtype == dns.TypeSRV:
			m.Answer = []dns.RR{
				&dns.SRV{Hdr: hdr(q.Name, dns.TypeSRV), Port: 8190, Target: "gpu1.test."},
				&dns.SRV{Hdr: hdr(q.Name, dns.TypeSRV), Port: 8191, Target: "gpu1.test."},
				&dns.SRV{Hdr: hdr(q.Name, dns.TypeSRV), Port: 8188, Target: "gone.test."},
			}
		case q.Name == "gpu1.test." && q.Qtype == dns.TypeA:
			m.Answer = []dns.RR{&dns.A{Hdr: hdr(q.Name, dns.TypeA), A: net.IPv4(10, 0, 1, 1)}}
		case q.Name == "gpu1.test.":
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

func TestResolveWorkers(t *testing.T) {
	addr := zone(t)
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	tests := []struct {
		name    string
		src     DNSConfig
		want    []string
		wantErr bool
	}{
		{"A and AAAA on the port", DNSConfig{Name: "two.test", Port: 8188, Scheme: "http"},
			[]string{"http://10.0.0.1:8188", "http://10.0.0.2:8188", "http://[fd00::1]:8188"}, false},
		{"https", DNSConfig{Name: "two.test", Port: 443, Scheme: "https"},
			[]string{"https://10.0.0.1:443", "https://10.0.0.2:443", "https://[fd00::1]:443"}, false},
		{"SRV: each target's addresses with the record's port; a target that does not exist adds none",
			DNSConfig{Name: "_comfyui._tcp.test", Port: 1, Scheme: "http"},
			[]string{"http://10.0.1.1:8190", "http://10.0.1.1:8191"}, false},
		{"a name that does not exist: no workers", DNSConfig{Name: "nothing.test", Port: 8188, Scheme: "http"}, nil, false},
		{"a failing server: an error (the pool keeps its workers)", DNSConfig{Name: "broken.test", Port: 8188, Scheme: "http"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := resolveWorkers(ctx, r, tt.src)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			var urls []string
			for _, w := range got {
				urls = append(urls, w.URL)
			}
			if !slices.Equal(urls, tt.want) {
				t.Fatalf("workers %v, want %v", urls, tt.want)
			}
		})
	}
}
