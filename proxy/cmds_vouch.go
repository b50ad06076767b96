package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
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
		what, msg := "refused", msgVouchRefused(why)
		if errors.Is(err, netio.ErrVouchIncomplete) {
			what, msg = "incomplete", msgVouchIncomplete(why) // markers were written
		}
		c.s.cfg.Logger.Warn("VOUCH "+what+": "+why, "client", c.nc.RemoteAddr().String())
		c.replyErr(msg)
		return
	}
	c.s.cfg.Logger.Warn("VOUCH: "+strconv.Itoa(n)+" brand-new masters vouched for: they all count now", "client", c.nc.RemoteAddr().String())
	c.reply(resp.Value{Kind: resp.KindSimple, Str: []byte("OK")})
}
