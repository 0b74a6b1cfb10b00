package storetest

// The drivers the helpers open register their URL schemes with store.Register when imported.
import (
	_ "github.com/channels-dev/channels/taskplane/store/postgres"
	_ "github.com/channels-dev/channels/taskplane/store/sqlite"
)
