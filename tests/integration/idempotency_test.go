package integration

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
)

func TestUploadIdempotencyKey(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, b)

			t.Run("reuse is refused and creates nothing", func(t *testing.T) {
				key := uuid.NewString()
				first := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(randomBytes(1000), "a.png")...)
				if first.Status != http.StatusCreated {
					t.Fatalf("first: %d %s", first.Status, first.Body)
				}
				other := randomBytes(1000)
				again := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(other, "b.png")...)
				if again.Status != 422 || again.errorCode(t) != "idempotency_key_reuse" {
					t.Fatalf("reuse: %d %s", again.Status, again.Body)
				}
				if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+hashOf(other), nil, nil); r.Status != http.StatusNotFound {
					t.Errorf("the refused upload left a record")
				}
				// A refused reuse must not release the first request's claim.
				third := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(randomBytes(10), "c.png")...)
				if third.Status != 422 {
					t.Errorf("key released by a refused reuse: %d", third.Status)
				}
				deleteAsset(t, g, first.JSON(t)["id"].(string))
				if tmp := blobFiles(t, g, "tmp"); len(tmp) != 0 {
					t.Errorf("temp files left: %v", tmp)
				}
			})

			// The contract refuses any later request with a used key, one
			// that is wrong in another way too (it answered the validation
			// error), and a fresh key refused for its body stays free.
			t.Run("a used key with a broken request is reuse", func(t *testing.T) {
				key := uuid.NewString()
				first := submit(t, g, map[string]any{"workflow": invertWorkflow("nobody.png")}, map[string]string{"Idempotency-Key": key})
				if first.Status != 422 || first.errorCode(t) != "missing_asset" {
					t.Fatalf("first, refused for its body: %d %s", first.Status, first.Body)
				}
				up := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(randomBytes(100), "k.png")...)
				if up.Status != http.StatusCreated {
					t.Fatalf("the key a refused request left free: %d %s", up.Status, up.Body)
				}
				for _, r := range []response{
					submit(t, g, map[string]any{"workflow": invertWorkflow("nobody.png")}, map[string]string{"Idempotency-Key": key}),
					upload(t, g, map[string]string{"Idempotency-Key": key}, part{name: "file_path", value: "no-file.png"}),
				} {
					if r.Status != 422 || r.errorCode(t) != "idempotency_key_reuse" {
						t.Errorf("a broken request with the used key: %d %s, want 422 idempotency_key_reuse", r.Status, r.Body)
					}
				}
				deleteAsset(t, g, up.JSON(t)["id"].(string))
			})

			t.Run("bad keys", func(t *testing.T) {
				for _, key := range []string{strings.Repeat("k", 256), "has space", "tab\tkey"} {
					r := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(randomBytes(10), "a.png")...)
					if r.Status != 400 || r.errorCode(t) != "invalid_request" {
						t.Errorf("key %q: %d %s", key, r.Status, r.Body)
					}
				}
			})

			t.Run("50 concurrent requests with one key", func(t *testing.T) {
				key := uuid.NewString()
				var wg sync.WaitGroup
				statuses := make([]int, 50)
				ids := make([]string, 50)
				for i := range statuses {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(randomBytes(20_000), "c.png")...)
						statuses[i] = r.Status
						if r.Status == http.StatusCreated {
							ids[i] = r.JSON(t)["id"].(string)
						} else if r.Status != 422 || r.errorCode(t) != "idempotency_key_reuse" {
							t.Errorf("request %d: %d %s", i, r.Status, r.Body)
						}
					}()
				}
				wg.Wait()
				var created []string
				for _, id := range ids {
					if id != "" {
						created = append(created, id)
					}
				}
				if len(created) != 1 {
					t.Fatalf("%d requests processed, want exactly 1 (statuses %v)", len(created), statuses)
				}
				deleteAsset(t, g, created[0])
				waitNothingLeft(t, g)
			})
		})
	}
}

// TestTenantIsolation: for a second account, the first account's asset id,
// hash and dedup status are indistinguishable from missing ones.
func TestTenantIsolation(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			g := gateway.Start(t, siteConfig(b.global(t, dir), "comfy_auth api_keys"), gateway.Options{Dir: dir})
			alice := map[string]string{"Authorization": "Bearer " + createKey(t, g, "alice")}
			bob := map[string]string{"Authorization": "Bearer " + createKey(t, g, "bob")}

			// Credentials: missing, malformed, unknown and wrong secret are one 401.
			var bodies []string
			for _, h := range []map[string]string{nil, {"Authorization": "Bearer nope"}, {"Authorization": "Bearer cgk_unknown_secret"}, {"Authorization": alice["Authorization"] + "x"}} {
				r := upload(t, g, h, uploadParts(randomBytes(10), "a.png")...)
				if r.Status != 401 || r.errorCode(t) != "unauthorized" {
					t.Fatalf("credential %v: %d %s", h, r.Status, r.Body)
				}
				bodies = append(bodies, strings.ReplaceAll(string(r.Body), r.Header.Get("X-Request-Id"), ""))
			}
			for _, b := range bodies[1:] {
				if b != bodies[0] {
					t.Errorf("401 bodies differ: %q vs %q", b, bodies[0])
				}
			}

			data := randomBytes(5000)
			hash := hashOf(data)
			up := upload(t, g, alice, uploadParts(data, "secret.png")...)
			if up.Status != http.StatusCreated {
				t.Fatalf("alice upload: %d %s", up.Status, up.Body)
			}
			id := up.JSON(t)["id"].(string)
			missing := uuid.NewString()

			for _, path := range []string{"/api/v2/assets/%s", "/api/v2/assets/%s/content"} {
				theirs := do(t, http.MethodGet, g.URL+strings.Replace(path, "%s", id, 1), nil, bob)
				none := do(t, http.MethodGet, g.URL+strings.Replace(path, "%s", missing, 1), nil, bob)
				if theirs.Status != 404 || theirs.Status != none.Status || theirs.errorCode(t) != none.errorCode(t) {
					t.Errorf("%s: foreign %d %s vs missing %d %s", path, theirs.Status, theirs.Body, none.Status, none.Body)
				}
			}
			if r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+id, nil, bob); r.Status != 404 {
				t.Errorf("bob deleted alice's asset: %d", r.Status)
			}
			if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+hash, nil, bob); r.Status != 404 {
				t.Errorf("HEAD by-hash of alice's bytes for bob: %d", r.Status)
			}
			fh := do(t, http.MethodPost, g.URL+"/api/v2/assets/from-hash", strings.NewReader(`{"hash":"`+hash+`"}`), bob)
			fhMissing := do(t, http.MethodPost, g.URL+"/api/v2/assets/from-hash", strings.NewReader(`{"hash":"`+hashOf([]byte("never"))+`"}`), bob)
			if fh.Status != 404 || fh.errorCode(t) != "blob_not_found" || fhMissing.errorCode(t) != "blob_not_found" {
				t.Errorf("from-hash foreign: %d %s; missing: %s", fh.Status, fh.Body, fhMissing.Body)
			}
			// Bob uploading the same bytes sees a brand-new blob.
			bobUp := upload(t, g, bob, uploadParts(data, "mine.png")...)
			if bobUp.Status != http.StatusCreated || bobUp.JSON(t)["created_new"] != true {
				t.Errorf("bob's upload of alice's bytes: %d %s", bobUp.Status, bobUp.Body)
			}
			// And alice's asset is still whole.
			if r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, alice); r.Status != 200 || len(r.Body) != len(data) {
				t.Errorf("alice's content: %d", r.Status)
			}
		})
	}
}
