//go:build !unix

package sqlite

// fileLock does nothing where flock is not available: there, keeping a
// second process off the database is the operator's business.
type fileLock struct{}

func lockFile(string) (*fileLock, error) { return &fileLock{}, nil }

func (*fileLock) release() {}
