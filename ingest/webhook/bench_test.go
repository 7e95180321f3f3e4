package webhook

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkWebhookReplayWindow measures what replay_window costs a
// request: signed github deliveries, each a new body, POSTed by 16
// concurrent senders to the real listener of a source without a window and
// of one with (its one statement per request, sql/webhook_replay.sql).
// ns/op is the time per request over all senders; compare the two.
func BenchmarkWebhookReplayWindow(b *testing.B) {
	for _, window := range []time.Duration{0, time.Hour} {
		b.Run("window="+window.String(), func(b *testing.B) {
			wb := setupWebhook(b, nil, func(c *Config) {
				c.Sources = []SourceConfig{{Name: "g", Verify: GitHub, Secrets: []string{githubSecret},
					EventID: Field{Header: "X-GitHub-Delivery"}, UnsignedID: true, UnsignedType: true, ReplayWindow: window}}
			})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var n atomic.Int64
			b.SetParallelism(8) // 16 senders on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					body := fmt.Appendf(nil, `{"n":%d,"padding":"%0200d"}`, i, 0)
					req, _ := http.NewRequest(http.MethodPost, wb.base+"g", bytes.NewReader(body))
					req.Header.Set("X-Hub-Signature-256", "sha256="+signHex(githubSecret, body))
					req.Header.Set("X-GitHub-Delivery", "d-"+strconv.FormatInt(i, 10))
					req.Header.Set("X-GitHub-Event", "push")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("answer %d", resp.StatusCode)
						return
					}
				}
			})
			b.StopTimer()
			client.CloseIdleConnections()
		})
	}
}
