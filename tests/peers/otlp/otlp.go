// Package otlp is a test peer that receives OpenTelemetry traces over
// OTLP/HTTP (POST /v1/traces, protobuf), decoded with OpenTelemetry's own
// protobuf packages, and keeps the spans for a test to inspect.
package otlp

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	TraceID, SpanID, ParentID string
	Name                      string
	// Service is the resource's service.name.
	Service string
	Attrs   map[string]string
	// Events are the span's events, each its name and attributes.
	Events []Event
	// Error is true when the span's status is an error.
	Error bool
	Start time.Time
}

// Event is one span event.
type Event struct {
	Name  string
	Attrs map[string]string
}

// Receiver is a running OTLP/HTTP trace receiver.
type Receiver struct {
	// URL is its base address, the value of OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	// countOnly keeps no spans, only their number (benchmarks).
	countOnly bool

	mu       sync.Mutex
	spans    []Span
	count    int
	requests int
}

// Start runs a receiver until the test ends.
func Start(t testing.TB) *Receiver { return start(t, false) }

// StartCounter runs a receiver that neither decodes nor keeps the spans,
// only the bytes of the exports (Count), for benchmarks that export many:
// the load generator's process then spends next to nothing on them.
func StartCounter(t testing.TB) *Receiver { return start(t, true) }

func start(t testing.TB, countOnly bool) *Receiver {
	t.Helper()
	r := &Receiver{countOnly: countOnly}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Env is the environment that points a gateway's exporter at r, with a
// short batch delay so that spans arrive soon after they end.
func (r *Receiver) Env() []string {
	return []string{
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.URL,
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "only POST /v1/traces", http.StatusNotFound)
		return
	}
	if r.countOnly {
		n, _ := io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.count += int(n)
		r.requests++
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					Name: s.GetName(), Service: service, Attrs: attrs(s.GetAttributes()),
					Error: s.GetStatus().GetCode() == 2, Start: time.Unix(0, int64(s.GetStartTimeUnixNano())),
				}
				if p := s.GetParentSpanId(); len(p) > 0 {
					sp.ParentID = hex.EncodeToString(p)
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, Event{Name: e.GetName(), Attrs: attrs(e.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.count += len(got)
	r.requests++
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Count is the number of spans received so far (of a counter: the bytes).
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait polls until done holds for the spans received, or fails the test
// after timeout with what arrived.
func (r *Receiver) Wait(t testing.TB, timeout time.Duration, done func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := r.Spans()
		if done(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("the spans wanted did not arrive in %s; got:\n%s", timeout, Dump(spans))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Trace returns the spans of one trace.
func Trace(spans []Span, traceID string) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Named returns the spans called name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Dump lists spans one a line, by trace and start, for failure messages.
func Dump(spans []Span) string {
	s := append([]Span(nil), spans...)
	sort.Slice(s, func(i, j int) bool {
		if s[i].TraceID != s[j].TraceID {
			return s[i].TraceID < s[j].TraceID
		}
		return s[i].Start.Before(s[j].Start)
	})
	var b strings.Builder
	for _, sp := range s {
		fmt.Fprintf(&b, "  %s %s<-%s %-24s %s %v\n", sp.TraceID[:8], sp.SpanID[:8], short(sp.ParentID), sp.Name, sp.Service, sp.Attrs)
	}
	return b.String()
}

func short(id string) string {
	if len(id) < 8 {
		return "--------"
	}
	return id[:8]
}
