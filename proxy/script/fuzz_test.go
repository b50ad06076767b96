package script

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// FuzzNormalize checks what Normalize promises for any input: it does not
// panic, it answers the same every time, it fails only with ErrSyntax (or
// for a script over MaxScriptBytes), comments and surrounding whitespace
// do not change the answer, and its output is (nearly) a fixed point.
//
// Idempotence, Normalize(canon) == canon, holds only when every string
// literal of canon is one Lua reads back as written. Canonical strings are
// written with strconv.Quote, which escapes non-printable bytes, invalid
// UTF-8 and non-printable runes as \xHH, \uHHHH or \UHHHHHHHH; Redis' Lua 5.1
// has none of those escapes and reads "\x01" as the three letters "x01", as
// Normalize does. So for such scripts the second pass changes the string's
// value. After that second pass every string is printable, and a third
// pass changes nothing: Normalize is idempotent from its second
// application on, which is what is asserted in general; the strict form is
// asserted when canon has no \x, \u or \U escape.
//
// The canonical text can also be longer than the source (spaces between
// tokens, quoting), so re-normalizing it is only checked when it fits in
// MaxScriptBytes.
func FuzzNormalize(f *testing.F) {
	for _, v := range seedVariants {
		f.Add([]byte(v.src))
	}
	for _, b := range builtins {
		for _, src := range b.texts() {
			f.Add([]byte(src))
		}
	}
	// Every script file the package keeps (exact library bytes).
	if files, err := filepath.Glob(filepath.Join("lua", "*.lua")); err == nil {
		for _, name := range files {
			if data, err := os.ReadFile(name); err == nil {
				f.Add(data)
			}
		}
	}
	for _, s := range []string{
		"", "--", "--[[", "[[", `"\`, `"\256"`, "local a = _1",
		"-- c\rreturn 1",
		`return "\x01\255é` + "\u00a0" + `"`,
		`return redis.call("\xffGET")`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, src []byte) {
		orig := string(src)
		canon, err := Normalize(src)
		if string(src) != orig {
			t.Fatalf("Normalize modified its input")
		}
		canon2, err2 := Normalize(src)
		if canon != canon2 || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Normalize(%q) not deterministic: %q, %v then %q, %v", src, canon, err, canon2, err2)
		}
		if err != nil {
			if canon != "" {
				t.Fatalf("Normalize(%q) returned %q with error %v", src, canon, err)
			}
			if len(src) <= MaxScriptBytes && !errors.Is(err, ErrSyntax) {
				t.Fatalf("Normalize(%q): %v, want ErrSyntax", src, err)
			}
			return
		}

		// Comments and whitespace around the script change nothing.
		if len(src)+64 <= MaxScriptBytes {
			for _, wrapped := range []string{
				"-- leading comment\n" + string(src),
				"--[==[ block\ncomment ]==]" + string(src),
				" \t\r\n" + string(src) + "\n\t ",
				string(src) + "\n-- trailing comment",
			} {
				got, err := Normalize([]byte(wrapped))
				if err != nil || got != canon {
					t.Fatalf("Normalize(%q) = %q, %v\nwant %q (as for %q)", wrapped, got, err, canon, src)
				}
			}
		}

		if len(canon) > MaxScriptBytes {
			return
		}
		again, err := Normalize([]byte(canon))
		if err != nil {
			t.Fatalf("canonical text %q of %q does not normalize: %v", canon, src, err)
		}
		if !hasGoOnlyEscape(canon) && again != canon {
			t.Fatalf("Normalize not idempotent on %q:\ncanon %q\nagain %q", src, canon, again)
		}
		if len(again) > MaxScriptBytes {
			return
		}
		third, err := Normalize([]byte(again))
		if err != nil || third != again {
			t.Fatalf("Normalize not idempotent from its second pass on %q:\nsecond %q\nthird  %q, %v", src, again, third, err)
		}
	})
}

// hasGoOnlyEscape reports whether a canonical text has a string literal with
// an escape strconv.Quote writes but Lua 5.1 does not read (\x, \u, \U).
// Canonical strings are the only places a double quote occurs.
func hasGoOnlyEscape(canon string) bool {
	for i := 0; i < len(canon); i++ {
		if canon[i] != '"' {
			continue
		}
		q, err := strconv.QuotedPrefix(canon[i:])
		if err != nil {
			return true // not written by strconv.Quote: be conservative
		}
		for k := 1; k < len(q)-1; k++ {
			if q[k] == '\\' {
				if c := q[k+1]; c == 'x' || c == 'u' || c == 'U' {
					return true
				}
				k++
			}
		}
		i += len(q) - 1
	}
	return false
}

func TestHasGoOnlyEscape(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{`return "abc"`, false},
		{`return "a\\xb"`, false}, // an escaped backslash, then x
		{`return "a\"x"`, false},
		{`return "\x01"`, true},
		{`return "\u00a0"`, true},
		{`return "\U0010ffff"`, true},
		{`return "ok" .. "\xff"`, true},
		{`return "\n\t\\"`, false},
	} {
		if got := hasGoOnlyEscape(c.in); got != c.want {
			t.Errorf("hasGoOnlyEscape(%s) = %v, want %v", c.in, got, c.want)
		}
	}
}

// The canonical text of a script whose strings hold bytes Lua cannot read
// back from strconv.Quote's escapes is not a fixed point (see FuzzNormalize),
// but its normalization is.
func TestNormalizeNearlyIdempotent(t *testing.T) {
	src := "return \"\\1\\255\" .. '\u00a0' .. ARGV[1]"
	canon := mustNormalize(t, src)
	again := mustNormalize(t, canon)
	if third := mustNormalize(t, again); third != again {
		t.Fatalf("third pass %q != second %q", third, again)
	}
}
