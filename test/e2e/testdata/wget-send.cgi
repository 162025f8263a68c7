#!/busybox sh
# /cgi-bin/send?user=U&session=S, served by busybox httpd in the e2e suite's
# wgetapp pod: one SMS sent with busybox wget, a client that is not Go, in
# plain HTTP to the injected retryguard-proxy on localhost, which governs it.
# The key's variables travel as Retryguard-Var-* headers. The answer is
# smsapp's JSON shape with the status only, read from the status line wget -S
# prints: busybox wget shows neither the headers nor the body of an error (the
# suite reads the code from the proxy's dead letter). No -T: this build's
# wget crashes with it.
bb=/busybox
user= session=
for kv in $(echo "$QUERY_STRING" | $bb tr '&' ' '); do
	case $kv in
	user=*) user=${kv#user=} ;;
	session=*) session=${kv#session=} ;;
	esac
done
out=$($bb wget -S -O /dev/null \
	--header "Retryguard-Var-User-Id: $user" --header "Retryguard-Var-Login-Session-Id: $session" \
	--post-data '{"to":"+15550100"}' http://127.0.0.1:15001/v1/messages 2>&1)
status=$(echo "$out" | $bb sed -n 's/^ *HTTP\/1\.[01] \([0-9][0-9]*\).*/\1/p' | $bb tail -n 1)
echo "Content-Type: application/json"
echo ""
echo "{\"status\":${status:-0}}"
