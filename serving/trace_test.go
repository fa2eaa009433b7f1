package serving_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"testing"
	"time"
	"fmt"
)

func tracedGet(url string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		start := time.Now()
		var conn, tlsd, first time.Duration
		tr := &httptrace.ClientTrace{
			ConnectDone:          func(string, string, error) { conn = time.Since(start) },
			TLSHandshakeDone:     func(tls.ConnectionState, error) { tlsd = time.Since(start) },
			GotFirstResponseByte: func() { first = time.Since(start) },
		}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, tr), "GET", url, nil)
		req.Header.Set("Authorization", "Bearer x")
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp, err := c.Do(req)
		if err == nil { resp.Body.Close() }
		fmt.Printf("TRACE conn %v tls %v first %v err %v\n", conn.Round(time.Millisecond), tlsd.Round(time.Millisecond), first.Round(time.Millisecond), err)
		return err
	}
}
var _ = testing.T{}
