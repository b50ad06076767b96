package spec

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/respconn"
)

// The lean one-key release and the general release reference give the
// same reply and leave the same keys on every state of the key.
func TestReleaseOneMatchesTheGeneralReleaseOnRedis(t *testing.T) {
	r := respconn.Start(t)
	type kstate struct {
		typ, val string
		ttl      int64 // 0: none
	}
	states := []kstate{{typ: "none"}}
	for _, v := range []string{"abcdef", "abcdefXYZ", "abc", "abX", "", "zzzzzz", "ab"} {
		for _, ttl := range []int64{0, 500, 30000} {
			states = append(states, kstate{"string", v, ttl})
		}
	}
	states = append(states, kstate{"hash", "abcdef", 30000}, kstate{"list", "abcdef", 0})
	read := func(key string) string {
		ty := r.Do("TYPE", key).Str
		pt := r.Do("PTTL", key).Int
		// The PTTL as -2, -1, short (the 500 ms key) or long (30 s).
		switch {
		case pt > 5000:
			pt = 2
		case pt >= 0:
			pt = 1
		}
		v := ""
		if string(ty) == "string" {
			v = string(r.Do("GET", key).Str)
		}
		return fmt.Sprintf("%s:%q:%d", ty, v, pt)
	}
	n := 0
	for _, tok := range []string{"abcdef", "abc", "", "abcdefXYZ"} {
		for _, p := range []int{0, 3, 6, 10} {
			for _, low := range []int64{0, 1500} {
				for _, comp := range []string{"", "c:"} {
					for _, compHeld := range []bool{false, true} {
						for _, nottl := range []bool{false, true} {
							for _, s := range states {
								for _, tokArg := range []int{0, 2} {
									cl := &Class{Role: RoleRelease, Layout: Layout{Keys: 1, Tokens: []int{tokArg}, Prefix: p, MinArg: -1, TTLArg: -1, NoTTLActs: nottl}}
									argv := []string{"x", "y", "z"}
									argv[tokArg] = tok
									ca := CallArgs{LowMs: low, Companion: comp, CapMs: 1 << 40}
									keys := []string{"k"}
									if !cl.releasesOne(1, ca) {
										t.Fatal("not the lean path")
									}
									cname := string(keyslot.Companion(nil, "c:", []byte("k")))
									set := func() {
										r.Do("FLUSHALL")
										switch s.typ {
										case "string":
											r.Do("SET", "k", s.val)
										case "hash":
											r.Do("HSET", "k", s.val, "1")
										case "list":
											r.Do("RPUSH", "k", s.val)
										}
										if s.ttl > 0 {
											r.Do("PEXPIRE", "k", strconv.FormatInt(s.ttl, 10))
										}
										if compHeld {
											r.Do("SET", cname, "state", "PX", "30000")
										}
									}
									// The lean call as the proxy encodes it.
									set()
									k1, a1 := DecodeCall(cl.AppendReference(nil, StrArgs(keys), StrArgs(argv), ca))
									lean := r.Eval(string(refReleaseOne.Body), k1, a1)
									leanState := read("k") + " " + read(cname)
									// The general call as it was encoded before the lean path.
									set()
									flags := 0
									if nottl {
										flags = 2
									}
									gk := []string{"k"}
									if comp != "" {
										gk = append(gk, cname)
									}
									ga := []string{"0", strconv.Itoa(p), strconv.FormatInt(low, 10), "0", strconv.Itoa(flags), "0", "1", "0", tok}
									gen := r.Eval(string(refRelease.Body), gk, ga)
									genState := read("k") + " " + read(cname)
									same := lean.Kind == gen.Kind && (lean.Kind == resp.KindError || lean.Equal(gen))
									if !same || leanState != genState {
										t.Errorf("tok=%q p=%d low=%d comp=%q held=%v state=%+v: lean %v leaves %s; general %v leaves %s",
											tok, p, low, comp, compHeld, s, lean, leanState, gen, genState)
									}
									n++
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d calls compared", n)
}
