module github.com/retryguard/retryguard/contract

go 1.26.0
