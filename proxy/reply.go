package proxy

import "github.com/redlock-proxy/redlock-proxy/internal/base/resp"

// appendReply encodes a reply for a client, in RESP2 or, after HELLO 3,
// RESP3 (where nil is "_").
func appendReply(b []byte, v resp.Value, resp3 bool) []byte {
	switch v.Kind {
	case resp.KindSimple:
		return resp.AppendSimple(b, v.Str)
	case resp.KindError:
		return resp.AppendError(b, string(v.Str))
	case resp.KindInt:
		return resp.AppendInt(b, v.Int)
	case resp.KindBulk:
		return resp.AppendBulk(b, v.Str)
	case resp.KindNil:
		return resp.AppendNull(b, resp3)
	case resp.KindArray:
		b = resp.AppendArrayHeader(b, len(v.Elems))
		for _, e := range v.Elems {
			b = appendReply(b, e, resp3)
		}
		return b
	}
	return resp.AppendError(b, msgInvalidReply)
}
