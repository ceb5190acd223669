package provider

// ScanChunk is scanChunk for the external tests: the events of one Chat
// Completions chunk read in one pass, ok false where it declines.
func ScanChunk(data []byte, started bool) ([]Event, bool) { return scanChunk(data, started, nil) }

// DecodeChunk is the chunk's reading by encoding/json, which Decode falls
// back to.
func DecodeChunk(data []byte, started bool) ([]Event, error) {
	return (&openAIDecoder{started: started}).decodeFull(data, nil)
}
