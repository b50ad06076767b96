package proxy

import (
	"github.com/tidwall/redcon"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// appendReply encodes a reply for a client, in RESP2 or, after HELLO 3,
// RESP3 (where nil is "_"). redcon's encoders do the RESP2 work.
func appendReply(b []byte, v resp.Value, resp3 bool) []byte {
	switch v.Kind {
	case resp.KindSimple:
		return redcon.AppendString(b, string(v.Str))
	case resp.KindError:
		return redcon.AppendError(b, string(v.Str))
	case resp.KindInt:
		return redcon.AppendInt(b, v.Int)
	case resp.KindBulk:
		return redcon.AppendBulk(b, v.Str)
	case resp.KindNil:
		if resp3 {
			return append(b, '_', '\r', '\n')
		}
		return redcon.AppendNull(b)
	case resp.KindArray:
		b = redcon.AppendArray(b, len(v.Elems))
		for _, e := range v.Elems {
			b = appendReply(b, e, resp3)
		}
		return b
	}
	return redcon.AppendError(b, "ERR redlock-proxy: internal error: invalid reply")
}
