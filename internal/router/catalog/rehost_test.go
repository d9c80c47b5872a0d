package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/router/rehost"
)

func TestLoadRehost(t *testing.T) {
	doc := `{"models": [
		{"id": "bfl/flux", "adapter": "bfl", "upstream": "https://api.bfl.test",
		 "rehost": {"urls": ["result.sample"], "lifetime": "12h"}},
		{"id": "bfl/kontext", "adapter": "bfl", "upstream": "https://api.bfl.test"},
		{"id": "fal/flux", "adapter": "fal", "upstream": "https://queue.fal.test"}
	]}`
	byProvider, err := rehost.RuleSpec{Base64: []string{"images[*]"}}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load([]byte(doc), nil, Options{Rehost: map[string]*rehost.Rule{"bfl": byProvider}})
	if err != nil {
		t.Fatal(err)
	}
	own, _ := c.Lookup("bfl/flux")
	if own.Rehost == nil || len(own.Rehost.URLs) != 1 || own.Rehost.URLs[0].String() != "result.sample" ||
		own.Rehost.Lifetime != 12*time.Hour || len(own.Rehost.Base64) != 0 {
		t.Fatalf("entry's own rule: %+v", own.Rehost)
	}
	inherited, _ := c.Lookup("bfl/kontext")
	if inherited.Rehost != byProvider || inherited.Rehost.Lifetime != rehost.DefaultLifetime {
		t.Fatalf("provider rule not applied: %+v", inherited.Rehost)
	}
	if other, _ := c.Lookup("fal/flux"); other.Rehost != nil {
		t.Fatalf("another provider got a rule: %+v", other.Rehost)
	}
	plain, err := Load([]byte(doc), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Version() == c.Version() {
		t.Fatal("the rehost rules do not change the catalog version")
	}
	for _, bad := range []string{
		`{"urls": []}`, `{"urls": ["a..b"]}`, `{"base64": ["x["]}`,
		`{"urls": ["a"], "lifetime": "0s"}`, `{"urls": ["a"], "lifetime": "soon"}`, `{"urls": ["a"], "ttl": "1h"}`,
	} {
		d := `{"models": [{"id": "bfl/flux", "adapter": "bfl", "upstream": "https://api.bfl.test", "rehost": ` + bad + `}]}`
		if _, err := Load([]byte(d), nil, Options{}); err == nil || !strings.Contains(err.Error(), "rehost") && !strings.Contains(err.Error(), "ttl") {
			t.Errorf("rehost %s: err = %v", bad, err)
		}
	}
}
