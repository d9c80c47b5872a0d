package partner

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestBFLMediaExpires(t *testing.T) {
	t.Parallel()
	p := NewBFL(t, WithMediaExpiry(500*time.Millisecond), WithMediaSize(3000))
	id, polling := bflSubmit(t, p)
	m := bflPoll(t, p, polling)
	sample := m["result"].(map[string]any)["sample"].(string)
	get := func() (int, []byte) {
		resp, err := http.Get(sample)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, b := get(); code != http.StatusOK || !bytes.Equal(b, MediaBytes(id, 3000)) || len(b) != 3000 {
		t.Fatalf("before expiry: %d, %d bytes", code, len(b))
	}
	time.Sleep(600 * time.Millisecond)
	if code, _ := get(); code != http.StatusForbidden {
		t.Fatalf("after expiry: %d", code)
	}
}

func TestSyncBase64AndMediaURL(t *testing.T) {
	t.Parallel()
	p := NewSyncJSON(t, WithBase64Media())
	m := call(t, p, http.MethodPost, p.URL+"/x", prompt, "Authorization", "Bearer "+DefaultSecret).obj(t)
	img := m["images"].([]any)[0].(map[string]any)
	b, err := base64.StdEncoding.DecodeString(img["b64_json"].(string))
	if err != nil || !bytes.HasPrefix(b, pngPixel) || img["url"] != nil {
		t.Fatalf("image %v", img)
	}
	p.SetOptions(WithNoFaults(), WithMediaURL("http://10.0.0.1/x.png"))
	m = call(t, p, http.MethodPost, p.URL+"/x", prompt, "Authorization", "Bearer "+DefaultSecret).obj(t)
	if u := m["images"].([]any)[0].(map[string]any)["url"]; u != "http://10.0.0.1/x.png" {
		t.Fatalf("url %v", u)
	}
}
