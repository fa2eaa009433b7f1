package cache_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/crypto/blake2b"
	"golang.org/x/sys/cpu"

	"github.com/reviewauth/reviewauth/internal/cache"
)

var prfs = []string{cache.PRFSHA256, cache.PRFBLAKE2b}

func testSecret() []byte {
	s := make([]byte, 64)
	for i := range s {
		s[i] = byte(i*7 + 1)
	}
	return s
}

func TestPRFIsChosenOnce(t *testing.T) {
	t.Parallel()
	p := cache.PRF()
	if p != cache.PRFSHA256 && p != cache.PRFBLAKE2b {
		t.Fatalf("PRF() = %q; want %q or %q", p, cache.PRFSHA256, cache.PRFBLAKE2b)
	}
	for range 3 {
		if got := cache.PRF(); got != p {
			t.Fatalf("PRF() = %q, then %q; want one choice per process", p, got)
		}
		if got := cache.NewKeyer().PRF(); got != p {
			t.Fatalf("NewKeyer().PRF() = %q; want PRF() = %q", got, p)
		}
	}
}

// TestPRFFollowsSHAHardware checks the choice on this machine, and on this
// machine with its SHA extensions hidden from crypto/sha256
// (GODEBUG=cpu.sha=off, in a child process): SHA-256 where the hardware
// hashes it, keyed BLAKE2b where it does not.
func TestPRFFollowsSHAHardware(t *testing.T) {
	if runtime.GOARCH != "amd64" || !cpu.X86.HasAVX2 {
		t.Skip("the expected choice is known for amd64 with AVX2 only")
	}
	if raceEnabled {
		t.Skip("the race detector slows BLAKE2b's Go code more than SHA-256's, which changes the choice PRF measures; checked without -race")
	}
	if os.Getenv("CACHE_TEST_PRF_CHILD") == "1" {
		fmt.Printf("prf=%s\n", cache.PRF())
		return
	}
	t.Parallel()
	tests := []struct {
		name   string
		godbg  string
		want   string
		reason string
	}{
		{"sha off", "cpu.sha=off", cache.PRFBLAKE2b, "crypto/sha256 runs without SHA extensions"},
		{"fips 140 mode", "fips140=on,cpu.sha=off", cache.PRFSHA256, "FIPS 140 mode keeps the approved SHA-256"},
	}
	if cpuHasSHA() && !strings.Contains(os.Getenv("GODEBUG"), "cpu.sha=off") {
		tests = append(tests, struct {
			name   string
			godbg  string
			want   string
			reason string
		}{"sha on", "", cache.PRFSHA256, "the CPU has SHA extensions"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestPRFFollowsSHAHardware$", "-test.count=1")
			cmd.Env = append(os.Environ(), "CACHE_TEST_PRF_CHILD=1", "GODEBUG="+tt.godbg)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if want := "prf=" + tt.want + "\n"; !bytes.Contains(out, []byte(want)) {
				t.Errorf("with GODEBUG=%q, PRF() printed %q; want %q (%s)", tt.godbg, out, want, tt.reason)
			}
		})
	}
}

// cpuHasSHA reports whether /proc/cpuinfo lists the x86 SHA extensions
// (golang.org/x/sys/cpu does not report them).
func cpuHasSHA() bool {
	info, err := os.ReadFile("/proc/cpuinfo")
	return err == nil && bytes.Contains(info, []byte(" sha_ni"))
}

// TestKeyerConstruction computes each PRF's keys independently, from the
// construction documented on Keyer, with the standard library's SHA-256
// and x/crypto's keyed BLAKE2b.
func TestKeyerConstruction(t *testing.T) {
	t.Parallel()
	secret := testSecret()
	u64 := func(v int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	encAudiences := func(auds []string) []byte {
		b := append([]byte{'A'}, u64(len(auds))...)
		for _, a := range auds {
			b = append(append(b, u64(len(a))...), a...)
		}
		return b
	}
	encToken := func(tok string) []byte { return append(binary.AppendUvarint(nil, uint64(len(tok))), tok...) }
	b2 := func(key, msg []byte) []byte {
		h, err := blake2b.New256(key)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(msg)
		return h.Sum(nil)
	}
	sh := func(key, msg []byte) []byte {
		s := sha256.Sum256(append(append([]byte(nil), key...), msg...))
		return s[:]
	}
	want := map[string]func(tok string, auds []string) []byte{
		cache.PRFSHA256: func(tok string, auds []string) []byte {
			block := make([]byte, 64)
			copy(block, sh(secret, encAudiences(auds)))
			block[63] = 'T'
			return sh(block, encToken(tok))
		},
		cache.PRFBLAKE2b: func(tok string, auds []string) []byte {
			return b2(b2(secret, encAudiences(auds)), append([]byte{'T'}, encToken(tok)...))
		},
	}
	for _, prf := range prfs {
		k := cache.NewKeyerPRF(prf, secret)
		for _, auds := range [][]string{nil, {"snap.example"}, {"a", "b"}} {
			for _, tok := range []string{"", "t", strings.Repeat("x", 866)} {
				w := want[prf](tok, auds)
				if got := k.TokenKey(tok, auds); !bytes.Equal(got[:], w) {
					t.Errorf("%s: TokenKey(%d bytes, %q) = %x; want %x", prf, len(tok), auds, got, w)
				}
				if got := k.ForAudiences(auds).Key(tok); !bytes.Equal(got[:], w) {
					t.Errorf("%s: ForAudiences(%q).Key(%d bytes) = %x; want %x", prf, auds, len(tok), got, w)
				}
			}
		}
		h := k.NewHash()
		h.WriteString("x")
		got := h.Sum()
		msg := append(u64(1), 'x')
		w := sh(secret, msg)
		if prf == cache.PRFBLAKE2b {
			w = b2(secret, msg)
		}
		if !bytes.Equal(got[:], w) {
			t.Errorf("%s: NewHash WriteString(x) = %x; want %x", prf, got, w)
		}
	}
}

func TestKeyerSeparatesInputsEveryPRF(t *testing.T) {
	t.Parallel()
	for _, prf := range prfs {
		t.Run(prf, func(t *testing.T) {
			t.Parallel()
			k := cache.NewKeyerPRF(prf, testSecret())
			pairs := []struct {
				name string
				a, b func() cache.Key
			}{
				{"token boundary vs audience", func() cache.Key { return k.TokenKey("ab", []string{"c"}) }, func() cache.Key { return k.TokenKey("a", []string{"bc"}) }},
				{"audience split", func() cache.Key { return k.TokenKey("t", []string{"a", "b"}) }, func() cache.Key { return k.TokenKey("t", []string{"ab"}) }},
				{"no audience vs empty audience", func() cache.Key { return k.TokenKey("t", nil) }, func() cache.Key { return k.TokenKey("t", []string{""}) }},
				{"audience order", func() cache.Key { return k.TokenKey("t", []string{"a", "b"}) }, func() cache.Key { return k.TokenKey("t", []string{"b", "a"}) }},
				{"token vs token plus a byte", func() cache.Key { return k.TokenKey("t", nil) }, func() cache.Key { return k.TokenKey("t\x00", nil) }},
				{"strings vs string", func() cache.Key {
					h := k.NewHash()
					h.WriteStrings([]string{"x"})
					return h.Sum()
				}, func() cache.Key {
					h := k.NewHash()
					h.WriteString("x")
					return h.Sum()
				}},
				{"other secret", func() cache.Key { return k.TokenKey("t", nil) }, func() cache.Key {
					s := testSecret()
					s[63]++
					return cache.NewKeyerPRF(prf, s).TokenKey("t", nil)
				}},
				{"other PRF", func() cache.Key { return k.TokenKey("t", nil) }, func() cache.Key {
					other := cache.PRFSHA256
					if prf == other {
						other = cache.PRFBLAKE2b
					}
					return cache.NewKeyerPRF(other, testSecret()).TokenKey("t", nil)
				}},
			}
			for _, p := range pairs {
				if p.a() == p.b() {
					t.Errorf("%s: keys are equal; want different", p.name)
				}
			}
			if k.TokenKey("t", []string{"a"}) != k.TokenKey("t", []string{"a"}) {
				t.Errorf("TokenKey is not deterministic within one Keyer")
			}
			// Pooled hashes are reset between uses: a key does not depend
			// on what was hashed before.
			tk := k.ForAudiences([]string{"a"})
			first := tk.Key("t")
			for i := range 10 {
				tk.Key(strings.Repeat("y", i*100))
				h := k.NewHash()
				h.WriteString(strings.Repeat("z", i*100))
				h.Sum()
			}
			if tk.Key("t") != first {
				t.Errorf("TokenKeyer.Key depends on earlier uses of the pool")
			}
		})
	}
}

func TestKeyerHotPathsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race; allocation counts are checked without it")
	}
	tok := strings.Repeat("x", 866)
	for _, prf := range prfs {
		k := cache.NewKeyerPRF(prf, testSecret())
		tk := k.ForAudiences([]string{"snap.example"})
		tk.Key(tok) // warm the pool
		if n := testing.AllocsPerRun(1000, func() { tk.Key(tok) }); n != 0 {
			t.Errorf("%s: TokenKeyer.Key allocs = %v; want 0", prf, n)
		}
		if n := testing.AllocsPerRun(1000, func() {
			h := k.NewHash()
			h.WriteString(tok)
			h.Sum()
		}); n != 0 {
			t.Errorf("%s: NewHash...Sum allocs = %v; want 0", prf, n)
		}
	}
}

// TestTokenKeyRemembersAudiences: with either PRF, TokenKey equals
// ForAudiences(...).Key for audience sets within the memo's bound and past
// it, and, for a set within it, allocates nothing (BLAKE2b keeps its
// TokenKeyer: context audiences cost no allocation on a cache hit).
func TestTokenKeyRemembersAudiences(t *testing.T) {
	tok := strings.Repeat("x", 866)
	for _, prf := range prfs {
		k := cache.NewKeyerPRF(prf, testSecret())
		for i := range cache.MaxRememberedAudiences + 2 { // at the bound, and past it
			auds := []string{fmt.Sprint("aud-", i), "common"}
			for range 2 {
				if got, want := k.TokenKey(tok, auds), k.ForAudiences(auds).Key(tok); got != want {
					t.Fatalf("%s: TokenKey(%q) != ForAudiences(%q).Key", prf, auds, auds)
				}
			}
		}
		if raceEnabled {
			continue
		}
		first := []string{"aud-0", "common"}
		if n := testing.AllocsPerRun(1000, func() { k.TokenKey(tok, first) }); n != 0 {
			t.Errorf("%s: TokenKey of a remembered audience set allocs = %v; want 0", prf, n)
		}
	}
}

func ExamplePRF() {
	// PRF names the keyed hash this process chose for its CPU; export it
	// (the metrics package does, as reviewauth_cache_key_prf_info) or log it.
	p := cache.PRF()
	fmt.Println(p == cache.PRFSHA256 || p == cache.PRFBLAKE2b)
	// Output: true
}

// BenchmarkTokenKeyPRF is BenchmarkTokenKey's ForAudiences case with each
// PRF, whatever the process chose. Run it with GODEBUG=cpu.sha=off to see
// SHA-256 without SHA extensions.
func BenchmarkTokenKeyPRF(b *testing.B) {
	tok := strings.Repeat("x", 866)
	for _, prf := range prfs {
		b.Run(prf, func(b *testing.B) {
			tk := cache.NewKeyerPRF(prf, testSecret()).ForAudiences([]string{"snap.example"})
			b.ReportAllocs()
			for b.Loop() {
				tk.Key(tok)
			}
		})
	}
}

// BenchmarkChoosePRF is the one-time cost of PRF's measurement.
func BenchmarkChoosePRF(b *testing.B) {
	for b.Loop() {
		cache.ChoosePRF()
	}
}
