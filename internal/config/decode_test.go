package config

import "testing"

// An unquoted Redis URL ending in ?key_prefix=NAME: is not YAML: the error
// points at it and says to quote it.
func TestAnUnquotedKeyPrefixSaysToQuoteIt(t *testing.T) {
	for _, text := range []string{
		minimal + "coordination: redis://127.0.0.1:6379/0?key_prefix=dev:\n",
		minimal + "coordination: redis://127.0.0.1:6379/0?key_prefix=dev:\nlisten: 127.0.0.1:8080\n",
	} {
		_, err := Parse("min.yaml", []byte(text))
		want := `min.yaml:12:15: YAML syntax: mapping values are not allowed in this context; the Redis URL's ?key_prefix=NAME: ends in ":", which YAML reads as a mapping key: quote it, e.g. "redis://127.0.0.1:6379/0?key_prefix=dev:"`
		if err == nil || err.Error() != want {
			t.Fatalf("got  %v\nwant %s", err, want)
		}
	}
	if _, err := Parse("min.yaml", []byte(minimal+`coordination: "redis://127.0.0.1:6379/0?key_prefix=dev:"`+"\n")); err != nil {
		t.Fatal(err)
	}
}
