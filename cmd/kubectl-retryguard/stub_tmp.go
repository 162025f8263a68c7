package main

import (
	"context"
	"io"
)

func runGraph(ctx context.Context, args []string, stdout, stderr io.Writer) int   { return 2 }
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) int { return 2 }
