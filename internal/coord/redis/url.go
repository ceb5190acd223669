package redis

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Mode is the kind of Redis deployment a coordination URL names
// (docs/replicas.md).
type Mode int

// The deployments a coordination URL can name.
const (
	// Single is one Redis server: redis://host:port/db.
	Single Mode = iota
	// Sentinel is a Redis server Redis Sentinel watches and fails over:
	// redis+sentinel://sentinel1:port,sentinel2:port/db?master_name=NAME.
	Sentinel
	// Cluster is a Redis Cluster, whose keys are spread over its shards:
	// redis+cluster://node1:port,node2:port.
	Cluster
)

func (m Mode) String() string {
	switch m {
	case Sentinel:
		return "sentinel"
	case Cluster:
		return "cluster"
	}
	return "single"
}

// Target is a parsed coordination URL: the deployment to connect to, and
// the prefix of every key and channel. Its fields hold no secret.
type Target struct {
	Mode Mode
	// Prefix starts every key and channel: "oncegate:" unless the URL's
	// key_prefix says otherwise.
	Prefix string
	// Hosts are host:port: the server, the sentinels, or the cluster
	// nodes to discover the others from.
	Hosts []string
	// DB is the database number (always 0 for a cluster).
	DB int
	// Master is the name the sentinels know the master by.
	Master string
	// TLS is set by the rediss schemes.
	TLS bool

	single   *goredis.Options
	failover *goredis.FailoverOptions
	cluster  *goredis.ClusterOptions
}

// defaultPrefix starts every key unless key_prefix says otherwise.
const defaultPrefix = "oncegate:"

// Schemes are the coordination URL schemes that name Redis, by mode: the
// rediss forms connect with TLS.
var Schemes = []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"}

// IsURL reports whether s has a scheme that names Redis (it may still be
// malformed: ParseURL says).
func IsURL(s string) bool {
	scheme, _, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	for _, x := range Schemes {
		if scheme == x {
			return true
		}
	}
	return false
}

// ParseURL parses a coordination URL, strictly: every part it does not
// understand is an error naming that part.
//
//	redis://[user:password@]host:port/db[?options]
//	redis+sentinel://[user:password@]host:port,host:port,…/db?master_name=NAME[&options]
//	redis+cluster://[user:password@]host:port,host:port,…[?options]
//
// rediss, rediss+sentinel and rediss+cluster connect with TLS. The user
// and password are the Redis servers' (a Sentinel's own credentials, if
// it has any, go in sentinel_username and sentinel_password). key_prefix
// starts every key and channel; the other options are go-redis's own for
// that kind of client (pool_size, client_name, …).
func ParseURL(raw string) (*Target, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	if !IsURL(raw) {
		return nil, fmt.Errorf("coordination URL: unknown scheme %q (want %s)", scheme, strings.Join(schemeList(), ", "))
	}
	base, mode, multi := strings.Cut(scheme, "+")
	// The host part of a multi-host URL is read here: net/url takes one
	// host (and refuses [::1] among several).
	var authority string
	if multi {
		i := strings.IndexAny(rest, "/?#")
		if i < 0 {
			i = len(rest)
		}
		authority, rest = rest[:i], rest[i:]
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			rest = authority[:at+1] + "x" + rest
			authority = authority[at+1:]
		} else {
			rest = "x" + rest
		}
	}
	u, err := url.Parse(base + "://" + rest)
	if err != nil {
		return nil, fmt.Errorf("coordination URL: %w", unwrapURLError(err))
	}
	t := &Target{TLS: base == "rediss", Prefix: defaultPrefix}
	q := u.Query()
	if q.Has("key_prefix") {
		if t.Prefix = q.Get("key_prefix"); t.Prefix == "" {
			return nil, fmt.Errorf("coordination URL: key_prefix is empty")
		}
		q.Del("key_prefix")
	}
	if !multi {
		if err := t.parseSingle(u, q); err != nil {
			return nil, err
		}
		return t, nil
	}
	if t.Hosts, err = parseHosts(authority); err != nil {
		return nil, err
	}
	for _, k := range []string{"addr", "username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("coordination URL: %s is not an option of %s:// (list every host before the path, and put the servers' credentials before the @)", k, scheme)
		}
	}
	if mode == "sentinel" {
		t.Mode, err = Sentinel, t.parseSentinel(scheme, u, q)
	} else {
		t.Mode, err = Cluster, t.parseCluster(u, q)
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

func schemeList() []string {
	out := make([]string, len(Schemes))
	for i, s := range Schemes {
		out[i] = s + "://"
	}
	return out
}

// unwrapURLError drops url.Error's quoting of the whole URL, which may
// hold a password.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// parseHosts reads host:port,host:port: every host with its port.
func parseHosts(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf("coordination URL: no host (want host:port,host:port,…)")
	}
	parts := strings.Split(s, ",")
	hosts := make([]string, 0, len(parts))
	for i, p := range parts {
		h, port, err := net.SplitHostPort(p)
		n, perr := strconv.Atoi(port)
		if err != nil || h == "" || perr != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("coordination URL: host %d of %d is %q: want host:port", i+1, len(parts), p)
		}
		hosts = append(hosts, net.JoinHostPort(h, port))
	}
	return hosts, nil
}

// goredisURL is the URL go-redis's own parsers read: the first host in
// the URL's host, the others in addr parameters.
func (t *Target) goredisURL(user *url.Userinfo, path string, q url.Values) string {
	for _, h := range t.Hosts[1:] {
		q.Add("addr", h)
	}
	u := url.URL{Scheme: "redis", User: user, Host: t.Hosts[0], Path: path, RawQuery: q.Encode()}
	if t.TLS {
		u.Scheme = "rediss"
	}
	return u.String()
}

func (t *Target) parseSingle(u *url.URL, q url.Values) error {
	v := *u
	v.RawQuery = q.Encode()
	opts, err := goredis.ParseURL(v.String())
	if err != nil {
		return fmt.Errorf("coordination URL: %w", unwrapURLError(err))
	}
	t.single, t.Hosts, t.DB = opts, []string{opts.Addr}, opts.DB
	return nil
}

func (t *Target) parseSentinel(scheme string, u *url.URL, q url.Values) error {
	t.Master = q.Get("master_name")
	if t.Master == "" {
		return fmt.Errorf("coordination URL: %s:// needs master_name, the name the sentinels know the master by", scheme)
	}
	// go-redis's failover URL takes the sentinels' credentials from its
	// userinfo and the servers' from its query: the other way round from
	// every other Redis URL, so this one turns them round.
	var sentinel *url.Userinfo
	if q.Has("sentinel_username") || q.Has("sentinel_password") {
		sentinel = url.UserPassword(q.Get("sentinel_username"), q.Get("sentinel_password"))
		q.Del("sentinel_username")
		q.Del("sentinel_password")
	}
	if u.User != nil {
		q.Set("username", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	opts, err := goredis.ParseFailoverURL(t.goredisURL(sentinel, u.Path, q))
	if err != nil {
		return fmt.Errorf("coordination URL: %w", unwrapURLError(err))
	}
	t.failover, t.DB = opts, opts.DB
	return nil
}

func (t *Target) parseCluster(u *url.URL, q url.Values) error {
	switch u.Path {
	case "", "/", "/0":
	default:
		return fmt.Errorf("coordination URL: path %q: a Redis Cluster has database 0 only (write redis+cluster://host:port,host:port)", u.Path)
	}
	// A brace in the prefix would make it every key's hash tag: the whole
	// deployment on one shard.
	if strings.ContainsAny(t.Prefix, "{}") {
		return fmt.Errorf("coordination URL: key_prefix %q: no { or } in a Redis Cluster's prefix (they make hash tags)", t.Prefix)
	}
	opts, err := goredis.ParseClusterURL(t.goredisURL(u.User, "", q))
	if err != nil {
		return fmt.Errorf("coordination URL: %w", unwrapURLError(err))
	}
	t.cluster = opts
	return nil
}

// Timeouts of every connection: fail fast when Redis is down, so that a
// new request waits for a connection at most dialTimeout before it is
// refused.
const (
	dialTimeout = time.Second
	ioTimeout   = 2 * time.Second
)

// newClient connects to the deployment: one client type for all three
// (go-redis's UniversalClient). Every command is sent once (the gateway
// owns retries: a script sent twice could take twice) and a connection is
// tried once, so that an outage is reported at once, not after backoffs.
func (t *Target) newClient() goredis.UniversalClient {
	switch t.Mode {
	case Sentinel:
		o := *t.failover
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dialTimeout, ioTimeout, ioTimeout
		o.MaxRetries, o.DialerRetries = -1, 1
		return goredis.NewFailoverClient(&o)
	case Cluster:
		o := *t.cluster
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dialTimeout, ioTimeout, ioTimeout
		o.MaxRetries, o.DialerRetries = -1, 1
		return goredis.NewClusterClient(&o)
	}
	o := *t.single
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dialTimeout, ioTimeout, ioTimeout
	o.MaxRetries, o.DialerRetries = -1, 1
	return goredis.NewClient(&o)
}

// String is the URL fit for logs: no credentials, no options but the
// master's name and the key prefix.
func (t *Target) String() string {
	scheme := "redis"
	if t.TLS {
		scheme = "rediss"
	}
	switch t.Mode {
	case Sentinel:
		scheme += "+sentinel"
	case Cluster:
		scheme += "+cluster"
	}
	s := scheme + "://" + strings.Join(t.Hosts, ",")
	if t.Mode != Cluster {
		s += "/" + strconv.Itoa(t.DB)
	}
	q := url.Values{}
	if t.Master != "" {
		q.Set("master_name", t.Master)
	}
	if t.Prefix != defaultPrefix {
		q.Set("key_prefix", t.Prefix)
	}
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// SplitPrefix takes the key_prefix parameter oncegate adds to a Redis URL
// out of it: every key and channel starts with it, so that several
// deployments (or tests) can share one Redis. Default "oncegate:".
func SplitPrefix(raw string) (redisURL, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", unwrapURLError(err)
	}
	q := u.Query()
	prefix = defaultPrefix
	if q.Has("key_prefix") {
		if prefix = q.Get("key_prefix"); prefix == "" {
			return "", "", fmt.Errorf("key_prefix is empty")
		}
		q.Del("key_prefix")
		u.RawQuery = q.Encode()
	}
	return u.String(), prefix, nil
}

// Redact returns a coordination URL fit for logs: no credentials.
func Redact(raw string) string {
	t, err := ParseURL(raw)
	if err != nil {
		scheme, _, _ := strings.Cut(raw, "://")
		if !IsURL(raw) {
			scheme = "redis"
		}
		return scheme + "://…"
	}
	return t.String()
}
