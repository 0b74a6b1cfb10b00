package sqlite

// Hooks for the external tests (package sqlite_test) to observe the writer.

// Batches reports how many transactions the writer has run.
func Batches(s *Store) int64 { return s.w.batches.Load() }

// Queued reports how many Updates wait in the writer's queue.
func Queued(s *Store) int { return s.w.q.Len() }

// Closing is closed once Close has begun.
func Closing(s *Store) <-chan struct{} { return s.w.q.Closing() }
