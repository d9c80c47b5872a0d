// Package tracing is comfygate's OpenTelemetry tracing: one tracer
// provider per process, off (a no-op tracer, nothing recorded, nothing
// stored) until Enable turns it on, exporting through the exporter that
// the standard OTEL_* environment variables choose (OTLP by default), as
// Caddy's own tracing handler does. Trace context travels as W3C
// traceparent: stored with a job at submit, so the dispatch and execution
// on whichever process claims it continue the submit's trace, and sent on
// every request comfygate makes to ComfyUI workers and partner APIs.
//
// Spans carry bounded attributes only: ids, pool and node class names,
// statuses and sizes; never credentials, prompts or workflow text.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/comfygate/comfygate/internal/apierr"
)

// ScopeName is the instrumentation scope of comfygate's spans.
const ScopeName = "github.com/comfygate/comfygate"

// Attribute keys of comfygate's own (no semantic convention names them).
const (
	AttrJobID      = attribute.Key("comfygate.job.id")
	AttrAttempt    = attribute.Key("comfygate.job.attempt")
	AttrPool       = attribute.Key("comfygate.pool")
	AttrAccount    = attribute.Key("comfygate.account")
	AttrDeployment = attribute.Key("comfygate.deployment")
	AttrAssetID    = attribute.Key("comfygate.asset.id")
	AttrStatus     = attribute.Key("comfygate.job.status")
	AttrNodeID     = attribute.Key("comfygate.node.id")
	AttrNodeClass  = attribute.Key("comfygate.node.class")
	AttrWorker     = attribute.Key("comfygate.worker")
	AttrCallID     = attribute.Key("comfygate.router.call.id")
	AttrBucket     = attribute.Key("comfygate.router.bucket")
	AttrRefusal    = attribute.Key("comfygate.router.refusal")
	AttrCredits    = attribute.Key("comfygate.credits")
)

var (
	noopTracer = noop.NewTracerProvider().Tracer(ScopeName)
	// current is the tracer spans start from; noopTracer while off.
	current atomic.Pointer[trace.Tracer]
	// on is true while a provider is enabled.
	on atomic.Bool

	mu       sync.Mutex
	users    int
	provider *sdktrace.TracerProvider
)

// propagator is W3C trace context: the traceparent (and tracestate) header.
var propagator = propagation.TraceContext{}

func init() {
	current.Store(&noopTracer)
}

// Enabled reports whether spans are recorded in this process.
func Enabled() bool { return on.Load() }

// Enable turns tracing on for the process (every call must be paired with
// a call of the release function it returns; the provider lives while any
// user holds it, across config reloads) with the exporter the OTEL_*
// environment variables choose and service.name from OTEL_SERVICE_NAME,
// else serviceName.
func Enable(ctx context.Context, serviceName, version string) (release func(context.Context) error, err error) {
	mu.Lock()
	defer mu.Unlock()
	if provider == nil {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: creating the span exporter: %w", err)
		}
		res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
			semconv.ServiceVersion(version)))
		if err != nil {
			return nil, fmt.Errorf("tracing: resource: %w", err)
		}
		if v, _ := res.Set().Value(semconv.ServiceNameKey); isDefaultServiceName(v.AsString()) {
			res, _ = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(serviceName)))
		}
		provider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(newBatcher(exp, batchConfigFromEnv())), sdktrace.WithResource(res))
		t := provider.Tracer(ScopeName)
		current.Store(&t)
		on.Store(true)
	}
	users++
	var once sync.Once
	return func(ctx context.Context) error {
		var err error
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			if users--; users > 0 {
				return
			}
			current.Store(&noopTracer)
			on.Store(false)
			err = provider.Shutdown(ctx)
			provider = nil
		})
		return err
	}, nil
}

// isDefaultServiceName is the SDK's default service.name
// ("unknown_service:<executable>"), which serviceName replaces.
func isDefaultServiceName(s string) bool {
	return s == "" || strings.HasPrefix(s, "unknown_service")
}

// Flush exports the spans ended so far (tests and shutdown).
func Flush(ctx context.Context) error {
	mu.Lock()
	p := provider
	mu.Unlock()
	if p == nil {
		return nil
	}
	return p.ForceFlush(ctx)
}

// Start starts a span named name as a child of ctx's span.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return (*current.Load()).Start(ctx, name, opts...)
}

// Fail marks span failed with err's type: the API error code (bounded,
// e.g. "queue_full") or, for any other error, its Go type. The message is
// left out: an error's text may name a job's inputs or a backend's
// address, and logs already carry it.
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	typ := fmt.Sprintf("%T", err)
	if e, ok := apierr.As(err); ok {
		typ = e.Code
	}
	FailAs(span, typ)
}

// FailAs marks span failed with the error type typ (a bounded name: an
// API error code, a router bucket), for a failure that is an answer
// rather than a Go error: a router call answered with a partner's error.
func FailAs(span trace.Span, typ string) {
	if typ == "" || !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(typ))
	span.SetStatus(codes.Error, typ)
}

// End ends span, recording *errp when it is not nil: `defer tracing.End(span, &err)`.
func End(span trace.Span, errp *error) {
	if errp != nil {
		Fail(span, *errp)
	}
	span.End()
}

// AttrPhaseDuration is a phase event's duration in milliseconds.
const AttrPhaseDuration = attribute.Key("comfygate.phase.duration_ms")

// Phase records a step of span's operation that ended now and began at
// start as an event named name with its duration (and attrs). Steps that
// are a few microseconds to a round trip long are events rather than child
// spans: a span costs the process several microseconds to record and
// export, an event a fraction of that, which keeps the hot paths' overhead
// within budget (BENCHMARKS.md#tracing).
func Phase(span trace.Span, name string, start time.Time, attrs ...attribute.KeyValue) {
	if !span.IsRecording() {
		return
	}
	// One slice for the event's attributes (the caller's variadic one
	// then stays on its stack).
	kv := make([]attribute.KeyValue, 0, len(attrs)+1)
	kv = append(append(kv, attrs...), AttrPhaseDuration.Float64(float64(time.Since(start).Microseconds())/1000))
	span.AddEvent(name, trace.WithAttributes(kv...))
}

// Inject writes ctx's trace context into h (traceparent, tracestate)
// when tracing is on and ctx carries a span.
func Inject(ctx context.Context, h http.Header) {
	if !on.Load() {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract returns ctx with the remote span context that h carries.
func Extract(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// TraceParent is ctx's span context as a W3C traceparent value, or ""
// while tracing is off or ctx carries no valid span.
func TraceParent(ctx context.Context) string {
	if !on.Load() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx carrying the remote span context of a
// stored traceparent value, so spans started from it join that trace;
// ctx unchanged when tp is empty or malformed.
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" || !on.Load() {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": tp})
}
