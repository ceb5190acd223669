// Package ledgerbench holds the ledger write paths measured against
// today's stores with the gateway's per-request write shape
// (ledgertest.BenchmarkRequestWrites), for docs/performance.md ("The
// ledger's write path: options measured"): LogStore, a request's writes
// kept in the intent log of internal/ledger/intentlog, alone (this
// package's benchmarks) or with SQLite written behind it
// (internal/ledger/sqlite's BenchmarkIntentLogBehindSQLite). It is a
// prototype to measure with; the gateway does not use it. Its benchmarks
// run only when asked for (go test -bench).
package ledgerbench
