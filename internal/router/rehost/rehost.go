package rehost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/storage"
)

// Defaults of Config.
const (
	DefaultMaxBytes = 64 << 20
	DefaultTimeout  = time.Minute
	// parallel bounds the results of one answer copied at once.
	parallel = 4
	// MaxResults bounds the results copied from one answer: a partner's
	// answer with thousands of URLs would otherwise be thousands of
	// fetches and assets for one call. The results past it keep the
	// partner's values and are counted as failed.
	MaxResults = 64
)

// Tag marks every rehosted asset; TagCallPrefix + the call's request id
// names the router call it came from.
const (
	Tag           = "router_result"
	TagCallPrefix = "router_call:"
)

// HeaderFailed is the response header that counts the results of an answer
// that could not be copied and still hold the partner's URL or payload.
const HeaderFailed = "Comfygate-Rehost-Failed"

// Keeper stores bytes as an asset (assets.Service.Keep).
type Keeper interface {
	Keep(ctx context.Context, account string, r io.Reader, in assets.Stored) (storage.Asset, error)
}

// Config wires a Copier.
type Config struct {
	Assets Keeper
	// MaxBytes bounds one result (DefaultMaxBytes when 0).
	MaxBytes int64
	// Timeout bounds the copy of one result, fetch and store
	// (DefaultTimeout when 0).
	Timeout time.Duration
	// AllowPrivate lets result URLs reach loopback, private and link-local
	// addresses. Off, such a result is not fetched (checked at dial time).
	AllowPrivate bool
	Logger       *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Copier copies results. It is safe for concurrent use.
type Copier struct {
	cfg    Config
	client *http.Client
	log    *zap.Logger
}

// New builds a Copier.
func New(cfg Config) *Copier {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Copier{cfg: cfg, client: newHTTPClient(cfg.AllowPrivate, cfg.Timeout), log: log}
}

// Target is whom a call's copies belong to and where they are served.
type Target struct {
	// Account owns the assets (the call's workspace).
	Account string
	// RequestID is the router call's id (tagged on each asset).
	RequestID string
	// ContentBase is the base the asset API is served under, for example
	// https://gw.example.com/api/v2; a copy is answered as
	// ContentBase/assets/{id}/content.
	ContentBase string
}

// Outcome is what Rewrite did.
type Outcome struct {
	// Body is the answer to send: rewritten when anything was copied, else
	// the partner's body unchanged.
	Body []byte
	// Copied and Failed count results.
	Copied, Failed int
}

type result struct {
	value  string
	base64 bool
	set    func(string)
	url    string
	err    error
}

// Rewrite copies every result rule selects in body (a JSON answer) and
// rewrites the members it copied to the assets' content URLs. A result that
// cannot be copied keeps its value and is counted in Failed; nothing fails
// the answer.
func (c *Copier) Rewrite(ctx context.Context, rule *Rule, t Target, body []byte) Outcome {
	out := Outcome{Body: body}
	if rule == nil {
		return out
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return out // not JSON: nothing to select
	}
	results, over := selectResults(rule, doc)
	out.Failed = over
	if len(results) == 0 {
		return out
	}
	expires := c.cfg.Now().Add(rule.Lifetime).UTC()
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, r := range results {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.copyOne(ctx, t, i, r, expires)
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.err != nil {
			out.Failed++
			continue
		}
		r.set(r.url)
		out.Copied++
	}
	if out.Copied > 0 {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(doc); err != nil {
			return Outcome{Body: body, Failed: len(results) + over}
		}
		out.Body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	return out
}

// selectResults lists the results rule selects in doc, the first
// MaxResults of them, and how many more there were.
func selectResults(rule *Rule, doc any) (results []*result, over int) {
	add := func(base64 bool) func(string, func(string)) {
		return func(v string, set func(string)) {
			if len(results) == MaxResults {
				over++
				return
			}
			results = append(results, &result{value: v, base64: base64, set: set})
		}
	}
	for _, p := range rule.URLs {
		p.Walk(doc, add(false))
	}
	for _, p := range rule.Base64 {
		p.Walk(doc, add(true))
	}
	return results, over
}

// errTooLarge is a result over MaxBytes.
var errTooLarge = errors.New("rehost: result too large")

func (c *Copier) copyOne(ctx context.Context, t Target, i int, r *result, expires time.Time) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	kind := "url"
	if r.base64 {
		kind = "base64"
	}
	var (
		a   storage.Asset
		err error
	)
	if r.base64 {
		a, err = c.copyBase64(ctx, t, i, r.value, expires)
	} else {
		a, err = c.copyURL(ctx, t, i, r.value, expires)
	}
	metrics.RouterRehostDuration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if err != nil {
		r.err = err
		reason := failureReason(ctx, err)
		metrics.RouterRehostCopies.WithLabelValues(kind, reason).Inc()
		c.log.Warn("router: copying a result failed; the answer keeps the partner's value",
			zap.String("request_id", t.RequestID), zap.String("kind", kind), zap.String("reason", reason), zap.Error(err))
		return
	}
	metrics.RouterRehostCopies.WithLabelValues(kind, "ok").Inc()
	metrics.RouterRehostBytes.Add(float64(a.SizeBytes))
	r.url = strings.TrimRight(t.ContentBase, "/") + "/assets/" + url.PathEscape(a.ID) + "/content"
}

// failureReason is the metric label of a failed copy.
func failureReason(ctx context.Context, err error) string {
	switch {
	case isRefusal(err):
		return "refused_address"
	case errors.Is(err, errTooLarge):
		return "too_large"
	case errors.Is(err, errBadResult):
		return "bad_result"
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}

// errBadResult is a value that is not a fetchable URL or decodable payload,
// or a fetch the source answered with an error status.
var errBadResult = errors.New("rehost: not a result")

func (c *Copier) copyURL(ctx context.Context, t Target, i int, raw string, expires time.Time) (storage.Asset, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return storage.Asset{}, fmt.Errorf("%w: %v", errBadResult, err)
	}
	if err := checkURL(u); err != nil {
		return storage.Asset{}, fmt.Errorf("%w: %v", errBadResult, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return storage.Asset{}, fmt.Errorf("%w: %v", errBadResult, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return storage.Asset{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return storage.Asset{}, fmt.Errorf("%w: the source answered %d", errBadResult, resp.StatusCode)
	}
	if resp.ContentLength > c.cfg.MaxBytes {
		return storage.Asset{}, fmt.Errorf("%w: %d bytes announced, limit %d", errTooLarge, resp.ContentLength, c.cfg.MaxBytes)
	}
	return c.keep(ctx, t, i, resp.Body, resp.Header.Get("Content-Type"), expires)
}

func (c *Copier) copyBase64(ctx context.Context, t Target, i int, v string, expires time.Time) (storage.Asset, error) {
	ct := ""
	if rest, ok := strings.CutPrefix(v, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		if !ok || !strings.HasSuffix(meta, ";base64") {
			return storage.Asset{}, fmt.Errorf("%w: a data: URI that is not base64", errBadResult)
		}
		ct, v = strings.TrimSuffix(meta, ";base64"), data
	}
	v = strings.TrimSpace(v)
	if int64(base64.StdEncoding.DecodedLen(len(v))) > c.cfg.MaxBytes+2 {
		return storage.Asset{}, fmt.Errorf("%w: about %d bytes, limit %d", errTooLarge, base64.StdEncoding.DecodedLen(len(v)), c.cfg.MaxBytes)
	}
	var b []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err = enc.DecodeString(v); err == nil {
			break
		}
	}
	if err != nil || len(b) == 0 {
		return storage.Asset{}, fmt.Errorf("%w: not base64", errBadResult)
	}
	return c.keep(ctx, t, i, bytes.NewReader(b), ct, expires)
}

// keep stores r (at most MaxBytes) as an asset of t.Account.
func (c *Copier) keep(ctx context.Context, t Target, i int, r io.Reader, contentType string, expires time.Time) (storage.Asset, error) {
	br := bufio.NewReaderSize(&limited{r: r, n: c.cfg.MaxBytes}, 512)
	head, _ := br.Peek(512)
	if len(head) == 0 {
		if _, err := br.ReadByte(); err != nil && err != io.EOF {
			return storage.Asset{}, err
		}
		return storage.Asset{}, fmt.Errorf("%w: empty", errBadResult)
	}
	ct := mediaType(contentType, head)
	return c.cfg.Assets.Keep(ctx, t.Account, br, assets.Stored{
		ContentType: ct,
		FilePath:    "router/" + safeSegment(t.RequestID) + "/" + strconv.Itoa(i) + extension(ct),
		Tags:        []string{Tag, TagCallPrefix + t.RequestID},
		ExpiresAt:   &expires,
	})
}

// limited reads at most n bytes and fails with errTooLarge beyond them.
type limited struct {
	r io.Reader
	n int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, errTooLarge
	}
	return n, err
}

// mediaType is the declared type when it is a usable one, else the sniffed.
func mediaType(declared string, head []byte) string {
	if mt, params, err := mime.ParseMediaType(declared); err == nil && mt != "application/octet-stream" && mt != "binary/octet-stream" {
		return mime.FormatMediaType(mt, params)
	}
	mt, params, err := mime.ParseMediaType(http.DetectContentType(head))
	if err != nil {
		return "application/octet-stream"
	}
	return mime.FormatMediaType(mt, params)
}

var extensions = map[string]string{
	"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif",
	"video/mp4": ".mp4", "video/webm": ".webm", "audio/mpeg": ".mp3", "audio/wav": ".wav",
	"application/json": ".json", "text/plain": ".txt",
}

func extension(ct string) string {
	mt, _, _ := mime.ParseMediaType(ct)
	if e, ok := extensions[mt]; ok {
		return e
	}
	return ".bin"
}

// safeSegment keeps a request id usable as a path segment.
func safeSegment(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
	if s == "" || s == "." || s == ".." {
		return "call"
	}
	return s
}
