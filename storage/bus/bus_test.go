package bus

import (
	"context"
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
