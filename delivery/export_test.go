package delivery

import "time"

// WithFinishTimeout bounds how long recording an outcome is tried (default 30 s), for tests whose
// store refuses the outcome on purpose.
func WithFinishTimeout(d time.Duration) Option { return func(e *Engine) { e.finishTimeout = d } }
