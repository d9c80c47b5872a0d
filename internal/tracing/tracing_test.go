package tracing

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkRouterCallSpans records a router call's spans as the router
// does (router.call with its two phase events and its attributes set once
// at its end, the router.partner_request child) through the SDK's batch
// processor to a no-op exporter: the recording's CPU and allocations,
// without the export's.
//
//	go test -run - -bench RouterCallSpans ./internal/tracing/
func BenchmarkRouterCallSpans(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer(ScopeName)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, s := tr.Start(context.Background(), "router.call")
			Phase(s, "router.admission", time.Now())
			_, c := tr.Start(ctx, "router.partner_request", trace.WithSpanKind(trace.SpanKindClient))
			c.SetAttributes(attribute.String("http.request.method", "POST"), attribute.String("gen_ai.request.model", "bench/constant"),
				attribute.String("server.address", "127.0.0.1"), attribute.Int("http.response.status_code", 200))
			c.End()
			Phase(s, "router.settle", time.Now(), AttrCredits.Int64(1))
			s.SetAttributes(AttrCallID.String("req_0123456789"), attribute.String("gen_ai.request.model", "bench/constant"),
				attribute.Int("http.response.status_code", 200))
			s.End()
		}
	})
}
