module github.com/shardtest/shardtest/protocol

go 1.26
