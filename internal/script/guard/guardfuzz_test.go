package guard

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// FuzzGuard: for any text, the vote policy's guard never panics; a script
// it accepts is written back in a form that parses, and that writing it
// back again leaves as it is (the backends run the program that was
// checked, in one canonical form).
func FuzzGuard(f *testing.F) {
	rng := rand.New(rand.NewSource(6))
	for i := 0; i < 20; i++ {
		f.Add(libscripts.Random(rng))
	}
	for _, s := range libscripts.Styles() {
		f.Add(s.Text)
	}
	for _, s := range []string{"return _G", "local t = {f = function(self, ...) return ... end} return t:f(1, 2)",
		"return (-1) ^ 2 .. 'x' .. \"\\0\\255\"", "repeat local x = 1 until x", "for i = 1, 3, 2 do end return #KEYS",
		"local function f(n) return n < 1 and 0 or f(n - 1) end return f(3)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		sc, ref := Script([]byte(text), "redlock-proxy:", 60_000)
		if ref != nil {
			if ref.Reason == "" {
				t.Fatalf("a refusal without a reason")
			}
			return
		}
		if _, err := sandbox.ParseChunk(sc.Body); err != nil {
			t.Fatalf("%q written back does not parse: %v\n%s", text, err, sc.Body)
		}
		body := string(sc.Body)
		start := strings.Index(body, "local __rlp_user = function(...)\n") + len("local __rlp_user = function(...)\n")
		end := strings.LastIndex(body, "\nend\nlocal __rlp_ok")
		user := body[start:end]
		again, ref := Script([]byte(user), "redlock-proxy:", 60_000)
		if ref != nil {
			t.Fatalf("%q: written back as\n%s\nwhich the guard refuses: %s", text, user, ref.Reason)
		}
		if string(again.Body) != body {
			t.Fatalf("%q: writing back twice differs:\n%s\n--\n%s", text, body, again.Body)
		}
	})
}
