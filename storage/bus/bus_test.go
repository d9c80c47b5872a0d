package bus

import (
	"context"
	"fmt"
	"testing"
)

func TestHubDeliversOnlyToTheJobsSubscribers(t *testing.T) {
	h := NewHub()
	a := h.Subscribe("a")
	b := h.Subscribe("b")
	q := h.SubscribeQueued()
	defer a.Cancel()
	defer b.Cancel()
	defer q.Cancel()

	h.Publish(context.Background(), Event{JobID: "a", Kind: "status"})
	h.Publish(context.Background(), Event{JobID: "c", Kind: "queued", Pool: "p"})

	if e := <-a.C; e.JobID != "a" || e.Kind != "status" {
		t.Errorf("a got %+v", e)
	}
	if e := <-q.C; e.Kind != "queued" || e.Pool != "p" {
		t.Errorf("queued got %+v", e)
	}
	select {
	case e := <-b.C:
		t.Errorf("b got %+v", e)
	default:
	}
}

func TestHubMarksSlowSubscribersLagged(t *testing.T) {
	h := NewHub()
	s := h.Subscribe("a")
	defer s.Cancel()
	for i := 0; i < subscriptionBuffer+5; i++ {
		h.Deliver(Event{JobID: "a", Kind: "progress"})
	}
	if !s.Lagged() {
		t.Fatal("overflow not reported")
	}
	if s.Lagged() {
		t.Fatal("Lagged did not clear")
	}
	if len(s.C) != subscriptionBuffer {
		t.Fatalf("buffer holds %d", len(s.C))
	}
}

func TestHubCancelRemoves(t *testing.T) {
	h := NewHub()
	s1, s2 := h.Subscribe("a"), h.Subscribe("a")
	if h.Subscribers() != 2 {
		t.Fatal(h.Subscribers())
	}
	s1.Cancel()
	s2.Cancel()
	if h.Subscribers() != 0 || len(h.subs) != 0 {
		t.Fatalf("subscriptions left: %d, keys %d", h.Subscribers(), len(h.subs))
	}
}

func TestHubRemembersTheLatestPreviewUntilTheJobEnds(t *testing.T) {
	h := NewHub()
	if _, ok := h.LatestPreview("a"); ok {
		t.Fatal("a preview before any was published")
	}
	h.Deliver(Event{JobID: "a", Kind: "preview", Data: []byte(`{"n":1}`)})
	h.Deliver(Event{JobID: "a", Kind: "preview", Data: []byte(`{"n":2}`)})
	h.Deliver(Event{JobID: "a", Kind: "status", Data: []byte(`{"status":"running"}`)})
	if e, ok := h.LatestPreview("a"); !ok || string(e.Data) != `{"n":2}` {
		t.Fatalf("latest preview = %s, %v", e.Data, ok)
	}
	h.Deliver(Event{JobID: "a", Kind: "status", Data: []byte(`{"status":"succeeded"}`)})
	if _, ok := h.LatestPreview("a"); ok {
		t.Fatal("the preview of an ended job is still held")
	}
	for i := 0; i < maxPreviews+10; i++ {
		h.Deliver(Event{JobID: fmt.Sprint(i), Kind: "preview"})
	}
	if len(h.previews) > maxPreviews {
		t.Fatalf("%d previews held, bound %d", len(h.previews), maxPreviews)
	}
}
