package sqlite

import (
	"time"

	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// checkpointEvery is how often the background checkpointer copies the WAL
// into the database while commits keep coming. A checkpoint copies each
// page once however many commits rewrote it, so a longer interval copies
// less: at 100 ms the checkpointer costs about 10 µs of CPU per request
// under the load benchmark, at 20 ms 45 µs. (How long the WAL grows
// between checkpoints is restartEvery's business.)
const checkpointEvery = 100 * time.Millisecond

// restartEvery is how often a checkpoint finishes with the pass that holds
// the writer off to start the WAL over (see checkpoint). That pass stalls
// every commit for one to several milliseconds — it syncs the WAL and the
// database, however few frames it copies — so it runs at every fifth
// checkpoint, not every one; the WAL then holds up to half a second of
// commits (about 40 MB under the load benchmark) before it starts over.
const restartEvery = 5 * checkpointEvery

// checkpoints copies committed WAL frames into the database file in the
// background, so that the WAL stays short: once everything in it is
// checkpointed, the next commit starts it over from its beginning.
func (s *Store) checkpoints() {
	defer close(s.cpStopped)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	restarted := time.Now()
	for {
		select {
		case <-s.stop:
			_, _ = s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
			return
		case <-s.committed:
			select {
			case <-t.C:
			case <-s.stop: // Close waits for no tick
				_, _ = s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
				return
			}
			restart := time.Since(restarted) >= restartEvery
			s.checkpoint(restart)
			if restart {
				restarted = time.Now()
			}
		}
	}
}

// checkpoint copies the WAL into the database, in a second pass too when
// restart. The first runs beside the writer (PASSIVE: it never blocks a
// writer or a reader) and copies nearly everything; but commits land
// while it runs, and a WAL with frames left over is never started over —
// each commit appends to it, so it grows for as long as traffic lasts (by
// 40 MB in five seconds under load), with a longer replay after a crash.
// The second pass holds the writer off while it copies the few frames the
// first missed, so the next commit finds the WAL fully checkpointed and
// writes over it from the start. A pass that cannot run now runs at the
// next tick.
func (s *Store) checkpoint(restart bool) {
	if _, err := s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil || !restart {
		return
	}
	s.conn.Lock()
	defer s.conn.Unlock()
	_, _ = s.cp.Exec(`PRAGMA wal_checkpoint(PASSIVE)`)
}
