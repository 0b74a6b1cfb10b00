package a2awire

// Limits bound what one request may carry. Every limit is explicit and answered with an
// InvalidParams error naming the field; zero fields take the defaults of DefaultLimits.
type Limits struct {
	// MaxBodyBytes bounds a request body (default 1 MiB).
	MaxBodyBytes int64
	// MaxParts bounds the parts of one message (default 64).
	MaxParts int
	// MaxTextBytes bounds one text part (default 256 KiB).
	MaxTextBytes int
	// MaxRawBytes bounds the decoded bytes of one raw part (default 512 KiB).
	MaxRawBytes int
	// MaxDataBytes bounds the JSON encoding of one data part (default 256 KiB).
	MaxDataBytes int
	// MaxDataDepth bounds the nesting of a data part or a metadata object (default 32).
	MaxDataDepth int
	// MaxMetadataBytes bounds the JSON encoding of one metadata object (default 64 KiB).
	MaxMetadataBytes int
	// MaxURLBytes bounds a url part (default 2048).
	MaxURLBytes int
	// MaxIDBytes bounds messageId, taskId, contextId and other ids (default 512).
	MaxIDBytes int
	// MaxListItems bounds string lists such as extensions and referenceTaskIds (default 64).
	MaxListItems int
	// MaxHistoryLength is the most history messages a task in a response carries, whatever the
	// caller asked for (default 100). A larger historyLength is clamped, not refused.
	MaxHistoryLength int
	// DefaultPageSize and MaxPageSize govern ListTasks (defaults 50 and 100; the protocol caps
	// MaxPageSize at 100).
	DefaultPageSize int
	MaxPageSize     int
	// MaxPageBytes bounds a ListTasks page by the stored size of its tasks (default 8 MiB, the
	// largest a task may be): a page that would pass it ends early, with a nextPageToken. A page
	// always holds one task.
	MaxPageBytes int
	// MaxStreams bounds the streams (SendStreamingMessage, SubscribeToTask) open at once on the
	// server, and MaxStreamsPerPrincipal those of one caller (defaults 1000 and 100). A stream
	// past either is refused before it opens, with RESOURCE_EXHAUSTED.
	MaxStreams             int
	MaxStreamsPerPrincipal int
	// MaxBlockingSends bounds the blocking SendMessage calls waiting for their task at once on
	// the server, and MaxBlockingSendsPerPrincipal those of one caller (defaults 1000 and 100).
	// A send past either is accepted as any other but does not wait: it answers at once with the
	// task as accepted, as one whose blocking timeout passed does.
	MaxBlockingSends             int
	MaxBlockingSendsPerPrincipal int
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:     1 << 20,
		MaxParts:         64,
		MaxTextBytes:     256 << 10,
		MaxRawBytes:      512 << 10,
		MaxDataBytes:     256 << 10,
		MaxDataDepth:     32,
		MaxMetadataBytes: 64 << 10,
		MaxURLBytes:      2048,
		MaxIDBytes:       512,
		MaxListItems:     64,
		MaxHistoryLength: 100,
		DefaultPageSize:  50,
		MaxPageSize:      100,
		MaxPageBytes:     8 << 20,

		MaxStreams:             1000,
		MaxStreamsPerPrincipal: 100,

		MaxBlockingSends:             1000,
		MaxBlockingSendsPerPrincipal: 100,
	}
}

// WithDefaults returns l with every zero or negative field set to its default and MaxPageSize
// capped at 100.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	set(&l.MaxParts, d.MaxParts)
	set(&l.MaxTextBytes, d.MaxTextBytes)
	set(&l.MaxRawBytes, d.MaxRawBytes)
	set(&l.MaxDataBytes, d.MaxDataBytes)
	set(&l.MaxDataDepth, d.MaxDataDepth)
	set(&l.MaxMetadataBytes, d.MaxMetadataBytes)
	set(&l.MaxURLBytes, d.MaxURLBytes)
	set(&l.MaxIDBytes, d.MaxIDBytes)
	set(&l.MaxListItems, d.MaxListItems)
	set(&l.MaxHistoryLength, d.MaxHistoryLength)
	set(&l.MaxPageSize, d.MaxPageSize)
	if l.MaxPageSize > 100 {
		l.MaxPageSize = 100
	}
	set(&l.MaxPageBytes, d.MaxPageBytes)
	set(&l.MaxStreams, d.MaxStreams)
	set(&l.MaxStreamsPerPrincipal, d.MaxStreamsPerPrincipal)
	set(&l.MaxBlockingSends, d.MaxBlockingSends)
	set(&l.MaxBlockingSendsPerPrincipal, d.MaxBlockingSendsPerPrincipal)
	set(&l.DefaultPageSize, d.DefaultPageSize)
	if l.DefaultPageSize > l.MaxPageSize {
		l.DefaultPageSize = l.MaxPageSize
	}
	return l
}

// JSONDepth returns the deepest nesting of objects and arrays in the JSON text b (a scalar is
// depth 0). It does not validate b; it is a cheap guard run before decoding.
func JSONDepth(b []byte) int {
	depth, maxDepth := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > maxDepth {
				maxDepth = depth
			}
		case '}', ']':
			depth--
		}
	}
	return maxDepth
}
