package gateway

import (
	"net/http"
	"time"

	"github.com/oncegate/oncegate/internal/accesslog"
	"github.com/oncegate/oncegate/internal/api"
)

// refuseDraining answers a request that arrived during the drain, and
// logs it as every exchange is.
func (g *Gateway) refuseDraining(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	lw := &accesslog.Writer{ResponseWriter: w, Entry: &accesslog.Entry{}}
	lw.Header().Set("Connection", "close")
	api.Errorf(api.CodeDraining, "this gateway is stopping and takes no new requests; send the request again (a load balancer sends it to another replica)").
		Write(lw, protocolOf(r), api.Meta{})
	g.logAccess(r, lw, time.Since(start))
}
