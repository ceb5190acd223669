package httpfront

import (
	"encoding/json"
	"testing"
)

// Whatever bytes a request head holds, naming its fault never panics, and
// what it names is valid text.
func FuzzHeadFault(f *testing.F) {
	for _, s := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "GARBAGE\r\n\r\n", "POST /v1/messages HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
		" \n\t\n", "", "GET /%zz HTTP/1.1\r\n\x01: y\r\n\r\n", "PRI * HTTP/2.0\r\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		for _, status := range []int{400, 417, 431, 501, 505} {
			msg := cannedMessage(status, "", head)
			if msg == "" {
				t.Fatalf("%d: no message for %q", status, head)
			}
			if _, err := json.Marshal(msg); err != nil {
				t.Fatal(err)
			}
		}
	})
}
