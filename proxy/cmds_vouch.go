package proxy

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// vouchCommands vouch for brand-new masters (netio's vouch.go): an
// operator's command, logged with who ran it.
var vouchCommands = []*commandDef{
	{name: "vouch", arity: 1, flags: []string{"admin"}, fn: handleVouch},
}

// voucher is what VOUCH needs of the backends.
type voucher interface {
	Vouch(ctx context.Context) (int, error)
}

func handleVouch(c *client, _ [][]byte) {
	v, ok := c.s.be.(voucher)
	if !ok {
		c.replyErr(msgVouchUnsupported)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := v.Vouch(ctx)
	if err != nil {
		why := strings.ReplaceAll(err.Error(), "\n", "; ")
		c.s.cfg.Logger.Warn("VOUCH refused: "+why, "client", c.nc.RemoteAddr().String())
		c.replyErr(msgVouchRefused(why))
		return
	}
	c.s.cfg.Logger.Warn("VOUCH: "+strconv.Itoa(n)+" brand-new masters vouched for: they count at once", "client", c.nc.RemoteAddr().String())
	c.reply(resp.Value{Kind: resp.KindSimple, Str: []byte("OK")})
}
