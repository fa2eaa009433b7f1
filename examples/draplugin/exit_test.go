package main

import (
	"testing"

	"github.com/reviewauth/reviewauth/examples/internal/clitest"
)

func TestExits(t *testing.T) {
	t.Parallel()
	clitest.CheckExits(t, "draplugin")
}
