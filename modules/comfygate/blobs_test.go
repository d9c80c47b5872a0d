package comfygate

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalBlobs(t *testing.T) {
	tests := []struct {
		name, in string
		want     BlobsConfig
		wantErr  string
	}{
		{name: "file_system", in: `blobs file_system /var/blobs`,
			want: BlobsConfig{Backend: "file_system", Dir: "/var/blobs"}},
		{name: "s3 full", in: `blobs s3 {
			endpoint https://s3.example.com
			bucket assets
			region eu-west-1
			prefix gw/
			access_key {env.AK}
			secret_key {env.SK}
			path_style
			presign 15m
			public_endpoint https://cdn.example.com
			part_size 16MiB
			timeout 30s
		}`, want: BlobsConfig{Backend: "s3", S3: &S3BlobsConfig{Endpoint: "https://s3.example.com", Bucket: "assets",
			Region: "eu-west-1", Prefix: "gw/", AccessKey: "{env.AK}", SecretKey: "{env.SK}", PathStyle: true,
			Presign: caddy.Duration(15 * time.Minute), PublicEndpoint: "https://cdn.example.com", PartSize: 16 << 20, Timeout: caddy.Duration(30 * time.Second)}}},
		{name: "presign default ttl", in: "blobs s3 {\n endpoint http://h:1\n bucket b\n presign\n}",
			want: BlobsConfig{Backend: "s3", S3: &S3BlobsConfig{Endpoint: "http://h:1", Bucket: "b", Presign: caddy.Duration(time.Hour)}}},
		{name: "unknown backend", in: `blobs gcs x`, wantErr: "unknown blobs backend"},
		{name: "file_system without dir", in: `blobs file_system`, wantErr: "wrong argument count"},
		{name: "s3 with an argument", in: `blobs s3 bucket`, wantErr: "wrong argument count"},
		{name: "unknown s3 option", in: "blobs s3 {\n acl public\n}", wantErr: `unknown blobs s3 option "acl"`},
		{name: "bad part_size", in: "blobs s3 {\n part_size big\n}", wantErr: "part_size"},
		{name: "bad timeout", in: "blobs s3 {\n timeout never\n}", wantErr: "timeout"},
		{name: "bad ttl", in: "blobs s3 {\n presign soon\n}", wantErr: "presign"},
		{name: "path_style with a value", in: "blobs s3 {\n path_style yes\n}", wantErr: "wrong argument count"},
		{name: "two endpoints", in: "blobs s3 {\n endpoint a b\n}", wantErr: "wrong argument count"},
		{name: "public_endpoint without a value", in: "blobs s3 {\n public_endpoint\n}", wantErr: "wrong argument count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := caddyfile.NewTestDispenser(tt.in)
			d.Next()
			got, err := unmarshalBlobs(d)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Backend != tt.want.Backend || got.Dir != tt.want.Dir || (got.S3 == nil) != (tt.want.S3 == nil) ||
				got.S3 != nil && *got.S3 != *tt.want.S3 {
				t.Fatalf("got %+v (s3 %+v), want %+v (s3 %+v)", got, got.S3, tt.want, tt.want.S3)
			}
		})
	}
}

func TestValidateBlobs(t *testing.T) {
	s3 := func(mut func(*S3BlobsConfig)) BlobsConfig {
		c := &S3BlobsConfig{Endpoint: "https://s3.example.com", Bucket: "b"}
		mut(c)
		return BlobsConfig{Backend: "s3", S3: c}
	}
	tests := []struct {
		name      string
		cfg       BlobsConfig
		maxUpload int64
		wantErr   string
	}{
		{"file_system", BlobsConfig{Backend: "file_system", Dir: "x"}, 1 << 40, ""},
		{"s3", s3(func(*S3BlobsConfig) {}), 100 << 20, ""},
		{"s3 without settings", BlobsConfig{Backend: "s3"}, 0, "needs its settings"},
		{"file_system with s3 settings", BlobsConfig{Backend: "file_system", S3: &S3BlobsConfig{}}, 0, "takes no s3 settings"},
		{"endpoint unset (an empty env var)", s3(func(c *S3BlobsConfig) { c.Endpoint = "" }), 0, "endpoint"},
		{"endpoint without scheme", s3(func(c *S3BlobsConfig) { c.Endpoint = "s3.example.com" }), 0, "endpoint"},
		{"endpoint with a path", s3(func(c *S3BlobsConfig) { c.Endpoint = "https://h/bucket" }), 0, "endpoint"},
		{"no bucket", s3(func(c *S3BlobsConfig) { c.Bucket = "" }), 0, "bucket"},
		{"public endpoint with presign", s3(func(c *S3BlobsConfig) {
			c.Presign, c.PublicEndpoint = caddy.Duration(time.Hour), "https://cdn.example.com:8443"
		}), 0, ""},
		{"public endpoint without presign", s3(func(c *S3BlobsConfig) { c.PublicEndpoint = "https://cdn.example.com" }), 0, "only used by presign"},
		{"public endpoint with a path", s3(func(c *S3BlobsConfig) {
			c.Presign, c.PublicEndpoint = caddy.Duration(time.Hour), "https://cdn.example.com/s3"
		}), 0, "public endpoint"},
		{"presign over 7 days", s3(func(c *S3BlobsConfig) { c.Presign = caddy.Duration(8 * 24 * time.Hour) }), 0, "presign"},
		{"negative timeout", s3(func(c *S3BlobsConfig) { c.Timeout = caddy.Duration(-time.Second) }), 0, "timeout"},
		{"part_size under 5 MiB", s3(func(c *S3BlobsConfig) { c.PartSize = 4 << 20 }), 0, "part size"},
		{"uploads over 10,000 default parts", s3(func(*S3BlobsConfig) {}), 80 << 30, "raise part_size"},
		{"uploads within 10,000 larger parts", s3(func(c *S3BlobsConfig) { c.PartSize = 16 << 20 }), 80 << 30, ""},
		{"unknown backend", BlobsConfig{Backend: "tape"}, 0, "unknown blobs backend"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.validate(tt.maxUpload)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}
