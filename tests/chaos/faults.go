// Package chaos is comfygate's chaos and soak suite: the real gateway
// binary (tests/gateway) reaches Postgres, Redis, the S3 server, the
// ComfyUI peers and a partner peer through toxiproxy proxies on real TCP
// (toxiproxy embedded as a library), a workload driver records every
// request and answer as a history, and a checker verifies the history
// against storage once the faults end.
package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Faults is an embedded toxiproxy server holding one proxy per dependency.
type Faults struct {
	server  *toxiproxy.ApiServer
	proxies map[string]*Proxy
}

// NewFaults starts an empty toxiproxy; its proxies stop when the test ends.
func NewFaults(t testing.TB) *Faults {
	f := &Faults{
		server:  toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		proxies: map[string]*Proxy{},
	}
	t.Cleanup(func() {
		for _, p := range f.proxies {
			p.p.Stop()
		}
	})
	return f
}

// Proxy is one toxiproxy proxy in front of a dependency.
type Proxy struct {
	Name string
	// Addr is the proxy's listen address, 127.0.0.1:port; it stays the
	// same across Down and Up.
	Addr string
	p    *toxiproxy.Proxy
	n    int
}

// Add starts a proxy named name in front of upstream (host:port).
func (f *Faults) Add(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	tp := toxiproxy.NewProxy(f.server, name, "127.0.0.1:0", upstream)
	if err := tp.Start(); err != nil {
		t.Fatalf("toxiproxy %s: %v", name, err)
	}
	p := &Proxy{Name: name, Addr: tp.Listen, p: tp}
	f.proxies[name] = p
	return p
}

// Proxy returns the proxy named name.
func (f *Faults) Proxy(name string) *Proxy { return f.proxies[name] }

// HealAll removes every toxic and brings every proxy up.
func (f *Faults) HealAll() error {
	for _, p := range f.proxies {
		if err := p.Heal(); err != nil {
			return err
		}
	}
	return nil
}

// toxic adds a toxic of kind on stream ("upstream" or "downstream") with
// attributes, returning its name.
func (p *Proxy) toxic(kind, stream string, attrs string) error {
	p.n++
	body := fmt.Sprintf(`{"name":"%s_%d","type":%q,"stream":%q,"toxicity":1,"attributes":%s}`,
		kind, p.n, kind, stream, attrs)
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("toxiproxy %s: add %s: %w", p.Name, kind, err)
	}
	return nil
}

// Latency delays data both ways by ms (± jitter ms).
func (p *Proxy) Latency(ms, jitter int) error {
	a := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms, jitter)
	if err := p.toxic("latency", "downstream", a); err != nil {
		return err
	}
	return p.toxic("latency", "upstream", a)
}

// Blackhole drops every byte both ways and never closes the connections
// (toxiproxy's timeout toxic with timeout 0): a peer that vanished from
// the network.
func (p *Proxy) Blackhole() error {
	if err := p.toxic("timeout", "downstream", `{"timeout":0}`); err != nil {
		return err
	}
	return p.toxic("timeout", "upstream", `{"timeout":0}`)
}

// Reset answers every connection that sends data with a TCP reset.
func (p *Proxy) Reset() error { return p.toxic("reset_peer", "upstream", `{"timeout":0}`) }

// Slicer cuts the dependency's answers into pieces of about size bytes
// with delayUS microseconds between them.
func (p *Proxy) Slicer(size, delayUS int) error {
	return p.toxic("slicer", "downstream", fmt.Sprintf(`{"average_size":%d,"size_variation":%d,"delay":%d}`, size, size/2, delayUS))
}

// Down closes the listener and every open connection: the dependency is
// gone (connection refused) until Up.
func (p *Proxy) Down() { p.p.Stop() }

// Up listens again on the same address.
func (p *Proxy) Up() error {
	if p.p.Enabled {
		return nil
	}
	return p.p.Start()
}

// Heal removes every toxic and brings the proxy up.
func (p *Proxy) Heal() error {
	p.p.Toxics.ResetToxics(context.Background())
	return p.Up()
}
