package postgres_test

import (
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/storetest"
)

func TestRouterConformance(t *testing.T) {
	storetest.RunRouter(t, func(t *testing.T) storage.RouterStore { return freshStore(t) })
}
