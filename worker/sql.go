package worker

import _ "embed"

// The worker's SQL, one statement per file in sql/, each explaining its
// locking and fencing.
var (
	//go:embed sql/claim.sql
	claimSQL string
	//go:embed sql/complete.sql
	completeSQL string
	//go:embed sql/complete_tx.sql
	completeTxSQL string
	//go:embed sql/renew.sql
	renewSQL string
	//go:embed sql/rescue.sql
	rescueSQL string
	//go:embed sql/poison_candidate.sql
	poisonCandidateSQL string
	//go:embed sql/poison.sql
	poisonSQL string
	//go:embed sql/unpark.sql
	unparkSQL string
	//go:embed sql/blocked_keys.sql
	blockedKeysSQL string
	//go:embed sql/stats.sql
	statsSQL string
	//go:embed sql/notify.sql
	notifySQL string
	//go:embed sql/retention_processed.sql
	retentionProcessedSQL string
	//go:embed sql/retention_failed.sql
	retentionFailedSQL string
	//go:embed sql/retention_count.sql
	retentionCountSQL string
)

// notifyChannel is the channel the inbox trigger notifies on.
const notifyChannel = "inboxd_received"
