-- tests/service/upgrade/v0.sql - a kiln store of schema version 0, made by
-- SQL that reproduces that schema exactly: the DDL of
-- 0d955fd^:src/store/store.c (the kilnd before versions were kept), verbatim (it_upgrade.sh compares it with git history through
-- historic_ddl.py); the rows in the shape that kilnd wrote them (its INSERT's
-- columns, the spec as Job JSON, states of kiln/job.h: QUEUED 1, RUNNING 3,
-- SUCCEEDED 4, FAILED 5).
-- Jobs: SUCCEEDED, FAILED, QUEUED, RUNNING (no live replica: kilnd requeues it
-- as after any restart), a tuning study (hyperparameters) and one in a queue
-- (Kueue's queue-name label). No notebook: notebook instances came with
-- schema version 3.
BEGIN;
CREATE TABLE IF NOT EXISTS jobs( seq INTEGER PRIMARY KEY AUTOINCREMENT, project TEXT NOT NULL, job_id TEXT NOT NULL, spec TEXT NOT NULL, state INTEGER NOT NULL, priority INTEGER NOT NULL, create_ns INTEGER NOT NULL, start_ns INTEGER NOT NULL DEFAULT 0, end_ns INTEGER NOT NULL DEFAULT 0, error TEXT, version INTEGER NOT NULL DEFAULT 1, restarts INTEGER NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0, runtime TEXT, UNIQUE(project, job_id));
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(state, priority DESC, create_ns);
CREATE TABLE IF NOT EXISTS nodes(name TEXT PRIMARY KEY, cordoned INTEGER NOT NULL);

INSERT INTO jobs(seq,project,job_id,spec,state,priority,create_ns,start_ns,end_ns,error) VALUES(1,'p1','up_done','{"jobId":"up_done","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","echo done-before"]}}}',4,0,1000000000000,1100000000000,1200000000000,NULL);
INSERT INTO jobs(seq,project,job_id,spec,state,priority,create_ns,start_ns,end_ns,error) VALUES(2,'p1','up_failed','{"jobId":"up_failed","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","exit 3"]}}}',5,0,1001000000000,1101000000000,1201000000000,'exit status 3');
INSERT INTO jobs(seq,project,job_id,spec,state,priority,create_ns,start_ns,end_ns,error) VALUES(3,'p1','up_queued','{"jobId":"up_queued","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","sleep 60"]}}}',1,0,1002000000000,0000000000,0000000000,NULL);
INSERT INTO jobs(seq,project,job_id,spec,state,priority,create_ns,start_ns,end_ns,error) VALUES(4,'p1','up_running','{"jobId":"up_running","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","sleep 60"]}}}',3,0,1003000000000,1103000000000,0000000000,NULL);
INSERT INTO jobs(seq,project,job_id,spec,state,priority,create_ns,start_ns,end_ns,error) VALUES(5,'p1','up_study','{"jobId":"up_study","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","sleep 60"]},"hyperparameters":{"goal":"MAXIMIZE","hyperparameterMetricTag":"acc","maxTrials":2,"maxParallelTrials":1,"params":[{"parameterName":"lr","type":"DOUBLE","minValue":0.001,"maxValue":0.1,"scaleType":"UNIT_LOG_SCALE"}]}}}',1,0,1004000000000,0000000000,0000000000,NULL);
INSERT INTO jobs(seq,project,job_id,spec,state,priority,create_ns,start_ns,end_ns,error) VALUES(6,'p1','up_inqueue','{"jobId":"up_inqueue","trainingInput":{"scaleTier":"BASIC","region":"us-central1","masterConfig":{"containerCommand":["sh","-c","sleep 60"]}},"labels":{"kueue.x-k8s.io/queue-name":"user-queue","team":"a"}}',1,0,1005000000000,0000000000,0000000000,NULL);
COMMIT;
