package streamlimit

import "testing"

// TestLimiter: one bound per key across every kind of connection; a
// key's own cap; a replacement admitted at the bound; releases give back
// exactly one, once.
func TestLimiter(t *testing.T) {
	type step struct {
		op   string // acquire, acquireCap2, replace, release, releaseTwice (the last held)
		key  string
		ok   bool // for acquire: admitted
		open int  // the key's count after the step
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"bound per key", []step{
			{"acquire", "a", true, 1}, {"acquire", "a", true, 2}, {"acquire", "a", true, 3},
			{"acquire", "a", false, 3}, {"acquire", "b", true, 1},
		}},
		{"a release frees one slot, once", []step{
			{"acquire", "a", true, 1}, {"acquire", "a", true, 2}, {"acquire", "a", true, 3},
			{"releaseTwice", "a", true, 2}, {"acquire", "a", true, 3}, {"acquire", "a", false, 3},
		}},
		{"a key's own cap", []step{
			{"acquireCap2", "demo", true, 1}, {"acquireCap2", "demo", true, 2}, {"acquireCap2", "demo", false, 2},
			{"acquire", "demo", true, 3}, {"acquire", "demo", false, 3},
		}},
		{"a replacement at the bound", []step{
			{"acquire", "a", true, 1}, {"acquire", "a", true, 2}, {"acquire", "a", true, 3},
			{"replace", "a", true, 4}, {"acquire", "a", false, 4}, {"release", "a", true, 3}, {"acquire", "a", false, 3},
			{"release", "a", true, 2}, {"acquire", "a", true, 3},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := New(3)
			var held []func()
			for i, s := range tc.steps {
				switch s.op {
				case "acquire", "acquireCap2":
					max := 0
					if s.op == "acquireCap2" {
						max = 2
					}
					release, ok := l.Acquire(s.key, max)
					if ok != s.ok {
						t.Fatalf("step %d %s %s: admitted %v, want %v", i, s.op, s.key, ok, s.ok)
					}
					if ok {
						held = append(held, release)
					}
				case "replace":
					held = append(held, l.Replace(s.key))
				case "release", "releaseTwice":
					release := held[len(held)-1]
					held = held[:len(held)-1]
					release()
					if s.op == "releaseTwice" {
						release()
					}
				}
				if got := l.Open(s.key); got != s.open {
					t.Fatalf("step %d %s %s: %d open, want %d", i, s.op, s.key, got, s.open)
				}
			}
		})
	}
}
