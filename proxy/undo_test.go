package proxy

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The later forms of the undo, run on a real redis-server: a key is deleted
// while it holds its token and was set either before the attempt's reply
// could leave (at) or within the last recentUndo; a copy set in between (a
// retry with the same token, granted through another proxy) stays.
func TestLaterUndoSparesARetryGrantedAfterTheReply(t *testing.T) {
	s := startUndoRedis(t)
	ttl := 9 * time.Second
	for _, form := range []struct {
		name  string
		cmd   func(keys, tokens [][]byte, at int64) []byte
		token func(k string) string
	}{
		{"one token", func(keys, tokens [][]byte, at int64) []byte {
			return laterForm(appendUndoCmd(nil, undoScript, keys, tokens[:1], ttl), undoScript, undoLaterScript, at)
		}, func(string) string { return "tok" }},
		{"a token per key", func(keys, tokens [][]byte, at int64) []byte {
			return laterForm(appendUndoCmd(nil, undoPerKeyScript, keys, tokens, ttl), undoPerKeyScript, undoPerKeyLaterScript, at)
		}, func(k string) string { return "tok-" + k }},
	} {
		t.Run(form.name, func(t *testing.T) {
			p := strings.ReplaceAll(form.name, " ", "-") + ":"
			set := func(k, v string, px time.Duration) {
				if r, err := s.Do("SET", p+k, v, "PX", strconv.FormatInt(px.Milliseconds(), 10)); err != nil || r != "OK" {
					t.Fatalf("SET %s: %q %v", k, r, err)
				}
			}
			set("now", form.token("now"), ttl)                     // set just now: a resumed master's late SET
			set("before", form.token("before"), ttl-2*time.Second) // set 2 s ago, before the reply left
			set("retry", form.token("retry"), ttl-200*time.Millisecond)
			set("other", "someone-else", ttl)
			names := []string{"now", "before", "retry", "other"}
			var keys, tokens [][]byte
			for _, k := range names {
				keys = append(keys, []byte(p+k))
				tokens = append(tokens, []byte(form.token(k)))
			}
			at := time.Now().Add(-time.Second).UnixMilli() // the reply left a second ago (same clock)
			v, err := resp.NewReader(bufio.NewReader(bytes.NewReader(form.cmd(keys, tokens, at))), resp.ReaderLimits{}).Read()
			if err != nil {
				t.Fatal(err)
			}
			var args []string
			for _, e := range v.Elems {
				args = append(args, string(e.Str))
			}
			if r, err := s.Do(args...); err != nil || r != "2" {
				t.Fatalf("later undo = %q, %v; want 2 keys deleted", r, err)
			}
			for k, want := range map[string]string{"now": "0", "before": "0", "retry": "1", "other": "1"} {
				if r, _ := s.Do("EXISTS", p+k); r != want {
					t.Errorf("after the later undo, EXISTS %s = %s, want %s", k, r, want)
				}
			}
		})
	}
}

// A retry with the same token whose holder has since lengthened its lock
// (an additive extend, or an extend to a longer TTL) holds a copy whose
// PTTL is above the failed attempt's TTL: that copy was re-armed after
// the attempt set it, so it is the holder's lock, never this attempt's
// late SET. The later undo must leave it, however recent its PTTL looks.
func TestLaterUndoSparesARetryWhoseLockWasLengthened(t *testing.T) {
	s := startUndoRedis(t)
	ttl := 9 * time.Second
	for _, form := range []struct {
		name string
		cmd  func(keys, tokens [][]byte, at int64) []byte
	}{
		{"one token", func(keys, tokens [][]byte, at int64) []byte {
			return laterForm(appendUndoCmd(nil, undoScript, keys, tokens[:1], ttl), undoScript, undoLaterScript, at)
		}},
		{"a token per key", func(keys, tokens [][]byte, at int64) []byte {
			return laterForm(appendUndoCmd(nil, undoPerKeyScript, keys, tokens, ttl), undoPerKeyScript, undoPerKeyLaterScript, at)
		}},
	} {
		t.Run(form.name, func(t *testing.T) {
			key := strings.ReplaceAll(form.name, " ", "-") + ":lengthened"
			// Granted to the retry after the attempt's reply left, then
			// extended by 5 s: its PTTL is now above the attempt's TTL.
			if r, err := s.Do("SET", key, "tok", "PX", strconv.FormatInt((ttl+5*time.Second).Milliseconds(), 10)); err != nil || r != "OK" {
				t.Fatalf("SET: %q %v", r, err)
			}
			at := time.Now().Add(-time.Second).UnixMilli() // the reply left a second ago
			v, err := resp.NewReader(bufio.NewReader(bytes.NewReader(form.cmd([][]byte{[]byte(key)}, [][]byte{[]byte("tok")}, at))), resp.ReaderLimits{}).Read()
			if err != nil {
				t.Fatal(err)
			}
			var args []string
			for _, e := range v.Elems {
				args = append(args, string(e.Str))
			}
			if r, err := s.Do(args...); err != nil || r != "0" {
				t.Errorf("later undo = %q, %v; want 0 keys deleted", r, err)
			}
			if r, _ := s.Do("EXISTS", key); r != "1" {
				t.Errorf("the holder's lengthened lock was deleted by a failed attempt's later undo")
			}
		})
	}
}

// startUndoRedis starts a redis-server with the later undo scripts loaded.
func startUndoRedis(t *testing.T) *redisproc.Server {
	t.Helper()
	s, err := redisproc.Start(t.TempDir())
	if err != nil {
		t.Fatalf("redis-server: %v (run ./test.sh, which installs it)", err)
	}
	t.Cleanup(s.Stop)
	for _, sc := range []*resp.Script{undoLaterScript, undoPerKeyLaterScript} {
		if _, err := s.Do("SCRIPT", "LOAD", string(sc.Body)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
