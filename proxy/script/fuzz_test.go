package script

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzNormalize checks what Normalize promises for any input: it does not
// panic, it answers the same every time, it fails only with ErrSyntax (or
// for a script over MaxScriptBytes), comments and surrounding whitespace
// do not change the answer, and its output is a fixed point: canonical
// strings are written with Lua 5.1 escapes, so the canonical text is itself
// a script that normalizes to itself. (The canonical text can be longer
// than the source, so re-normalizing it is only checked when it fits in
// MaxScriptBytes.)
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
		if again != canon {
			t.Fatalf("Normalize not idempotent on %q:\ncanon %q\nagain %q", src, canon, again)
		}
	})
}
