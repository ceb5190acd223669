//go:build !failpoints

package gateway

// failpoint is a test hook compiled only with -tags failpoints (see
// failpoint_on.go); here it does nothing.
func failpoint(string) {}
