package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/inboxd/inboxd/internal/backoff"
)

// brokerProbe asks the brokers for what the consumer group has left to
// read, per partition. An error means the brokers could not be reached (or
// would not answer).
type brokerProbe interface {
	lag(ctx context.Context) (map[topicPartition]int64, error)
	topicRetention(ctx context.Context, topics []string) (map[string]time.Duration, error)
	// close releases the probe's connections.
	close()
}

// adminProbe is the brokerProbe on a kafka-go client, with the consumer's
// TLS and SASL settings.
type adminProbe struct {
	client *kafka.Client
	group  string
	topics []string
}

func newAdminProbe(c Config, d *kafka.Dialer) *adminProbe {
	return &adminProbe{
		client: &kafka.Client{
			Addr:    kafka.TCP(c.Brokers...),
			Timeout: 10 * time.Second,
			Transport: &kafka.Transport{
				ClientID:    c.ClientID,
				DialTimeout: 10 * time.Second,
				TLS:         d.TLS,
				SASL:        d.SASLMechanism,
			},
		},
		group:  c.Group,
		topics: c.Topics,
	}
}

func (a *adminProbe) close() {
	if t, ok := a.client.Transport.(*kafka.Transport); ok {
		t.CloseIdleConnections()
	}
}

// lag is, per partition of the consumed topics, the high-water mark minus
// the group's committed offset (or minus the first offset, before the group
// committed any).
func (a *adminProbe) lag(ctx context.Context) (map[topicPartition]int64, error) {
	md, err := a.client.Metadata(ctx, &kafka.MetadataRequest{Topics: a.topics})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	want := make(map[string][]kafka.OffsetRequest)
	parts := make(map[string][]int)
	for _, t := range md.Topics {
		if t.Error != nil {
			continue // an unknown topic has no lag to report; the reader says why
		}
		for _, p := range t.Partitions {
			want[t.Name] = append(want[t.Name], kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
			parts[t.Name] = append(parts[t.Name], p.ID)
		}
	}
	if len(want) == 0 {
		return map[topicPartition]int64{}, nil
	}
	offsets, err := a.client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: want})
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	committed, err := a.client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: a.group, Topics: parts})
	if err != nil {
		return nil, fmt.Errorf("fetch committed offsets: %w", err)
	}
	// A group that never committed is "not found" for some brokers; for
	// others its offsets are -1. Both mean: nothing committed yet.
	if committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound) {
		return nil, fmt.Errorf("fetch committed offsets: %w", committed.Error)
	}
	done := make(map[topicPartition]int64)
	for topic, ps := range committed.Topics {
		for _, p := range ps {
			if p.Error == nil {
				done[topicPartition{topic, p.Partition}] = p.CommittedOffset
			}
		}
	}
	out := make(map[topicPartition]int64)
	for topic, ps := range offsets.Topics {
		for _, p := range ps {
			if p.Error != nil {
				continue
			}
			tp := topicPartition{topic, p.Partition}
			from := p.FirstOffset
			if c, ok := done[tp]; ok && c >= 0 {
				from = max(c, p.FirstOffset)
			}
			out[tp] = max(0, p.LastOffset-from)
		}
	}
	return out, nil
}

// topicRetention returns each topic's retention.ms as a duration (negative:
// kept for ever). Topics the brokers say nothing about are left out.
func (a *adminProbe) topicRetention(ctx context.Context, topics []string) (map[string]time.Duration, error) {
	req := &kafka.DescribeConfigsRequest{}
	for _, t := range topics {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: t, ConfigNames: []string{"retention.ms"},
		})
	}
	resp, err := a.client.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("describe topic configs: %w", err)
	}
	out := make(map[string]time.Duration)
	for _, r := range resp.Resources {
		if r.Error != nil {
			continue
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName != "retention.ms" {
				continue
			}
			ms, err := strconv.ParseInt(e.ConfigValue, 10, 64)
			if err != nil {
				continue
			}
			if ms < 0 {
				out[r.ResourceName] = -1
			} else {
				out[r.ResourceName] = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return out, nil
}

// watchBrokers polls the brokers every LagInterval while Run runs: it
// publishes the group's lag per partition and whether the brokers can be
// reached (ingest is not ready while they cannot). On the first answer it
// checks the deduplication window against each topic's retention.
func (c *kafkaConsumer) watchBrokers(ctx context.Context) {
	retry := backoff.NewRetrier(backoff.Exponential{Base: 500 * time.Millisecond, Max: c.cfg.LagInterval})
	checked := false
	for {
		pctx, cancel := context.WithTimeout(ctx, max(c.cfg.LagInterval, 10*time.Second))
		lag, err := c.probe.lag(pctx)
		if err == nil && !checked {
			checked = true
			c.checkDedupWindow(pctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		wait := c.cfg.LagInterval
		if err != nil {
			if c.reachable.Swap(false) || retry.Failures() == 0 {
				c.Log.Warn().Err(err).Msg("Kafka brokers cannot be reached: ingest is not ready")
			}
			c.Metrics.BrokerErrors.Inc()
			wait = retry.Failed()
		} else {
			if !c.reachable.Swap(true) && retry.Failures() > 0 {
				c.Log.Info().Msg("Kafka brokers reachable again")
			}
			retry.Succeeded()
			for tp, n := range lag {
				c.Metrics.Lag.WithLabelValues(tp.topic, strconv.Itoa(tp.partition)).Set(float64(n))
			}
		}
		c.UpdateReady()
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// checkDedupWindow warns about every topic that keeps messages longer than
// processed rows are kept: a message redelivered after its row was deleted
// (a consumer group reset to the earliest offset, say) would be processed
// again.
func (c *kafkaConsumer) checkDedupWindow(ctx context.Context) {
	if c.cfg.DedupWindow <= 0 {
		return
	}
	kept, err := c.probe.topicRetention(ctx, c.cfg.Topics)
	if err != nil {
		c.Log.Warn().Err(err).Msg("could not read the topics' retention.ms; the deduplication window is not checked")
		return
	}
	for _, topic := range c.cfg.Topics {
		d, ok := kept[topic]
		switch {
		case !ok:
			c.Log.Warn().Str("topic", topic).Msg("the brokers did not say how long this topic keeps messages; the deduplication window is not checked")
		case d < 0 || d > c.cfg.DedupWindow:
			kept := "for ever"
			if d >= 0 {
				kept = d.String()
			}
			c.Log.Warn().Str("topic", topic).Str("topic_retention", kept).Dur("inbox_retention", c.cfg.DedupWindow).
				Msg("the topic keeps messages longer than INBOXD_RETENTION keeps processed rows: a message " +
					"delivered again after its row is deleted would be processed again; raise INBOXD_RETENTION above the topic's retention.ms")
		}
	}
}
