package comfygate

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"

	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
)

// Blob store backends.
const (
	BlobsFileSystem = "file_system"
	BlobsS3         = "s3"
)

// DefaultPresignTTL is how long presigned URLs are valid when `presign`
// names no duration: as long as a proxied content URL is announced.
const DefaultPresignTTL = time.Hour

// S3BlobsConfig configures the s3 blob store.
type S3BlobsConfig struct {
	// Endpoint is the store's base URL, https://host[:port] (http:// only
	// on a trusted network). Accepts {env.X}.
	Endpoint string `json:"endpoint,omitempty"`
	// Bucket holds the blobs; it must exist. Accepts {env.X}.
	Bucket string `json:"bucket,omitempty"`
	// Region is the bucket's region. Default us-east-1. Accepts {env.X}.
	Region string `json:"region,omitempty"`
	// Prefix is prepended to every key, e.g. "comfygate/". Accepts {env.X}.
	Prefix string `json:"prefix,omitempty"`
	// AccessKey and SecretKey are the store's credentials. Accept {env.X}.
	AccessKey string `json:"access_key,omitempty"`
	SecretKey string `json:"secret_key,omitempty"`
	// PathStyle addresses the bucket in the URL path instead of the host
	// name (MinIO, Ceph, versitygw and most self-hosted stores need it).
	PathStyle bool `json:"path_style,omitempty"`
	// Presign, when set, makes asset and output URLs presigned GET URLs of
	// the store valid this long (at most 7 days), and GET …/content a 302
	// to a fresh one. Unset: content is served through the gateway.
	Presign caddy.Duration `json:"presign,omitempty"`
	// PublicEndpoint is the base URL at which clients reach the store,
	// https://host[:port], when it differs from Endpoint (an internal
	// address, a private network name): presigned URLs name it. The
	// signature covers the host, so a proxy or CDN there must pass
	// requests on to the store with that Host header unchanged. Only with
	// Presign. Accepts {env.X}.
	PublicEndpoint string `json:"public_endpoint,omitempty"`
	// PartSize is the multipart part size in bytes (at least 5 MiB): an
	// upload holds at most three parts in memory, and S3 allows 10,000
	// parts, so max_upload_size may be at most 10,000 parts. Default 8 MiB.
	PartSize int64 `json:"part_size,omitempty"`
	// Timeout is how long a request to the store may make no progress (no
	// byte sent or received, no answer) before it fails and is retried (up
	// to three times), so that a store that goes silent fails uploads and
	// reads within about four times this instead of hanging them.
	// Default 10s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

// applyBlobDefaults resolves placeholders and the file_system default dir.
func (a *App) applyBlobDefaults(repl *caddy.Replacer) {
	if a.Blobs == nil {
		a.Blobs = &BlobsConfig{}
	}
	if a.Blobs.Backend == "" {
		a.Blobs.Backend = BlobsFileSystem
	}
	if s := a.Blobs.S3; s != nil {
		for _, f := range []*string{&s.Endpoint, &s.PublicEndpoint, &s.Bucket, &s.Region, &s.Prefix, &s.AccessKey, &s.SecretKey} {
			*f = repl.ReplaceKnown(*f, "")
		}
	}
	if a.Blobs.Backend != BlobsFileSystem {
		return
	}
	a.Blobs.Dir = repl.ReplaceKnown(a.Blobs.Dir, "")
	if a.Blobs.Dir == "" {
		base := a.Storage.Dir
		if base == "" {
			base = DefaultDataDir
		}
		a.Blobs.Dir = filepath.Join(base, "blobs")
	}
}

// validate checks the blob store's configuration without I/O; uploads
// may be up to maxUpload bytes.
func (c *BlobsConfig) validate(maxUpload int64) error {
	switch c.Backend {
	case BlobsFileSystem:
		if c.S3 != nil {
			return fmt.Errorf("comfygate: blobs file_system takes no s3 settings")
		}
		return nil
	case BlobsS3:
		if c.S3 == nil {
			return fmt.Errorf("comfygate: blobs s3 needs its settings")
		}
		if c.S3.PublicEndpoint != "" && c.S3.Presign <= 0 {
			return fmt.Errorf("comfygate: blobs s3: public_endpoint is only used by presign, which is off")
		}
		if _, err := s3blob.New(c.S3.storeConfig()); err != nil {
			return fmt.Errorf("comfygate: blobs s3: %w", err)
		}
		if most := s3blob.MaxObjectSize(c.S3.PartSize); maxUpload > most {
			return fmt.Errorf("comfygate: max_upload_size %d is more than blobs s3 can take in 10,000 parts "+
				"(%d bytes); raise part_size", maxUpload, most)
		}
		return nil
	}
	return fmt.Errorf("comfygate: unknown blobs backend %q (want file_system or s3)", c.Backend)
}

func (c *S3BlobsConfig) storeConfig() s3blob.Config {
	return s3blob.Config{
		Endpoint: c.Endpoint, Bucket: c.Bucket, Region: c.Region, Prefix: c.Prefix,
		AccessKey: c.AccessKey, SecretKey: c.SecretKey, PathStyle: c.PathStyle,
		PresignTTL: time.Duration(c.Presign), PublicEndpoint: c.PublicEndpoint, PartSize: c.PartSize, Timeout: time.Duration(c.Timeout),
	}
}

// openBlobs opens the configured blob store: file_system creates its
// directories; s3 does no I/O until it is used (an unreachable store shows
// as failed uploads and reads, and in the sweeper's log).
func openBlobs(cfg BlobsConfig) (blob.Store, error) {
	if cfg.Backend == BlobsS3 {
		return s3blob.New(cfg.S3.storeConfig())
	}
	fs := blob.NewFileSystem(cfg.Dir)
	if err := fs.Init(); err != nil {
		return nil, err
	}
	return fs, nil
}

// presigner returns the blob store's presigner when presigning is on.
func (r *resources) presigner() blob.Presigner {
	if r.cfg.Blobs.S3 == nil || r.cfg.Blobs.S3.Presign <= 0 {
		return nil
	}
	p, _ := r.blobs.(blob.Presigner)
	return p
}

// unmarshalBlobs reads the blobs option:
//
//	blobs file_system <dir>
//	blobs s3 {
//		endpoint <url>
//		bucket <name>
//		region <region>
//		prefix <prefix>
//		access_key <key>
//		secret_key <secret>
//		path_style
//		presign [<ttl>]
//		public_endpoint <url>
//		part_size <size>
//		timeout <duration>
//	}
func unmarshalBlobs(d *caddyfile.Dispenser) (*BlobsConfig, error) {
	var backend string
	if !d.Args(&backend) {
		return nil, d.ArgErr()
	}
	switch backend {
	case BlobsFileSystem:
		var dir string
		if !d.AllArgs(&dir) {
			return nil, d.ArgErr()
		}
		return &BlobsConfig{Backend: backend, Dir: dir}, nil
	case BlobsS3:
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	default:
		return nil, d.Errf("unknown blobs backend %q", backend)
	}
	s := new(S3BlobsConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		switch name {
		case "path_style":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			s.PathStyle = true
			continue
		case "presign":
			s.Presign = caddy.Duration(DefaultPresignTTL)
			if d.NextArg() {
				if err := ParseDuration(d.Val(), &s.Presign); err != nil {
					return nil, d.Errf("presign: %v", err)
				}
			}
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			continue
		}
		if name == "timeout" {
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			if err := ParseDuration(v, &s.Timeout); err != nil {
				return nil, d.Errf("timeout: %v", err)
			}
			continue
		}
		if name == "part_size" {
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := humanize.ParseBytes(v)
			if err != nil {
				return nil, d.Errf("part_size: %v", err)
			}
			s.PartSize = int64(n)
			continue
		}
		into := map[string]*string{"endpoint": &s.Endpoint, "public_endpoint": &s.PublicEndpoint, "bucket": &s.Bucket, "region": &s.Region,
			"prefix": &s.Prefix, "access_key": &s.AccessKey, "secret_key": &s.SecretKey}[name]
		if into == nil {
			return nil, d.Errf("unknown blobs s3 option %q", name)
		}
		if !d.AllArgs(into) {
			return nil, d.ArgErr()
		}
	}
	return &BlobsConfig{Backend: backend, S3: s}, nil
}
