SELECT pg_notify('inboxd_received', '')
