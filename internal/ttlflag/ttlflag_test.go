package ttlflag_test

import (
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/reviewauth/reviewauth/internal/ttlflag"
)

func TestValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		start      time.Duration
		args       []string
		want       time.Duration
		wantString string
		wantErr    bool
	}{
		{name: "default", want: time.Minute, wantString: "1m0s"},
		{name: "preset kept", start: 5 * time.Second, want: 5 * time.Second, wantString: "5s"},
		{name: "zero disables", args: []string{"--ttl=0"}, want: -1, wantString: "0s"},
		{name: "zero with unit disables", args: []string{"--ttl=0s"}, want: -1, wantString: "0s"},
		{name: "one nanosecond caches", args: []string{"--ttl=1ns"}, want: time.Nanosecond, wantString: "1ns"},
		{name: "value", args: []string{"--ttl=2m"}, want: 2 * time.Minute, wantString: "2m0s"},
		{name: "negative refused", args: []string{"--ttl=-1s"}, wantErr: true},
		{name: "garbage refused", args: []string{"--ttl=soon"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := tt.start
			fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
			fs.Var(ttlflag.New(&d, time.Minute), "ttl", "")
			err := fs.Parse(tt.args)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Parse(%v) = nil; want an error", tt.args)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%v) = %v", tt.args, err)
			}
			if d != tt.want {
				t.Errorf("Parse(%v): TTL = %v; want %v", tt.args, d, tt.want)
			}
			if got := fs.Lookup("ttl").Value.String(); got != tt.wantString {
				t.Errorf("Parse(%v): String() = %q; want %q", tt.args, got, tt.wantString)
			}
		})
	}
}
