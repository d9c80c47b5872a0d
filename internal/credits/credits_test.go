package credits

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

func TestJobPrice(t *testing.T) {
	tests := []struct {
		name    string
		p       Price
		bound   time.Duration
		want    storage.JobPrice
		wantErr string
	}{
		{"per job only", Price{PerJob: 5}, time.Hour, storage.JobPrice{PerJob: 5, Reserve: 5}, ""},
		{"per second over the bound", Price{PerJob: 5, PerSecond: 2}, 90 * time.Second,
			storage.JobPrice{PerJob: 5, PerSecond: 2, Reserve: 5 + 2*90}, ""},
		{"a partial second rounds up", Price{PerSecond: 3}, 1500 * time.Millisecond,
			storage.JobPrice{PerSecond: 3, Reserve: 6}, ""},
		{"max charge", Price{PerJob: 5, PerSecond: 2, MaxCharge: 50}, 2 * time.Hour,
			storage.JobPrice{PerJob: 5, PerSecond: 2, Reserve: 50}, ""},
		{"free", Price{}, time.Hour, storage.JobPrice{}, "needs per_job or per_second"},
		{"negative", Price{PerJob: -1, PerSecond: 1}, time.Hour, storage.JobPrice{}, "negative"},
		{"max charge below per job", Price{PerJob: 10, MaxCharge: 9}, time.Hour, storage.JobPrice{}, "below per_job"},
		{"overflow", Price{PerSecond: storage.MaxCredits / 10}, time.Hour, storage.JobPrice{}, "too large"},
		{"too big", Price{PerJob: storage.MaxCredits + 1}, time.Hour, storage.JobPrice{}, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.JobPrice(tt.bound)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || !got.Valid() {
				t.Fatalf("JobPrice = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2030, 5, 6, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"", time.Time{}, false},
		{"2030-05-01T10:00:00+02:00", time.Date(2030, 5, 1, 8, 0, 0, 0, time.UTC), false},
		{"2030-05-01", time.Date(2030, 5, 1, 0, 0, 0, 0, time.UTC), false},
		{"24h", now.Add(-24 * time.Hour), false},
		{"-1h", time.Time{}, true},
		{"yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := ParseSince(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseAmount(t *testing.T) {
	for in, want := range map[string]int64{"100": 100, "-3": -3} {
		if got, err := ParseAmount(in); err != nil || got != want {
			t.Errorf("ParseAmount(%q) = %d, %v", in, got, err)
		}
	}
	for _, bad := range []string{"0", "1.5", "", "ten", "2000000000000000000"} {
		if _, err := ParseAmount(bad); err == nil {
			t.Errorf("ParseAmount(%q) accepted", bad)
		}
	}
}

func TestWriteUsageCSV(t *testing.T) {
	var b bytes.Buffer
	err := WriteUsage(&b, []storage.CreditUsage{
		{AccountID: "acme", Jobs: 3, ExecutionMS: 1234, RouterCalls: 2, Credits: 40},
		{AccountID: "a,b", Jobs: 0, ExecutionMS: 0, RouterCalls: 1, Credits: 0},
	}, true)
	want := "account,jobs,execution_seconds,router_calls,credits\nacme,3,1.234,2,40\n\"a,b\",0,0.000,1,0\n"
	if err != nil || b.String() != want {
		t.Fatalf("CSV = %q, %v; want %q", b.String(), err, want)
	}
}

func TestWriteLedger(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	entries := []storage.CreditEntry{
		{Seq: 1, Kind: storage.CreditGrant, Amount: 100, Note: "welcome", CreatedAt: at},
		{Seq: 2, Kind: storage.CreditReservation, Amount: -30, JobID: "j1", CreatedAt: at},
		{Seq: 3, Kind: storage.CreditSettlement, Amount: 20, Charged: 10, RunMS: 1500, JobID: "j1", CreatedAt: at},
	}
	var b bytes.Buffer
	if err := WriteLedger(&b, entries, 0, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"kind":"settlement","amount":20,"charged":10,"run_ms":1500,"job_id":"j1","balance":90`) {
		t.Fatalf("JSON lines:\n%s", b.String())
	}
	b.Reset()
	if err := WriteLedger(&b, entries, 0, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "job j1") || !strings.Contains(b.String(), "+100") {
		t.Fatalf("table:\n%s", b.String())
	}
}
