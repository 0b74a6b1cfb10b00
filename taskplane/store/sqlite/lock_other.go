//go:build !unix

package sqlite

import "errors"

type fileLock struct{}

// lockFile refuses to open the store where flock is unavailable: without the lock a second
// process could write behind the group-commit writer's back.
func lockFile(path string) (*fileLock, error) {
	return nil, errors.New("the sqlite store needs flock, which this platform lacks")
}

func (l *fileLock) lockDatabase(string) error { return nil }

func (l *fileLock) unlock() error { return nil }

func checkUnlocked(string) error {
	return errors.New("the sqlite store needs flock, which this platform lacks")
}
