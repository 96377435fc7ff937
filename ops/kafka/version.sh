# Sourced by ops/kafka/fetch and ops/kafka/start (needs `here` and `die`): which Apache Kafka
# the test broker runs, where its jars live and how it logs.
#
#   BUBBLEWATCH_KAFKA_VERSION  Kafka release (default below; 3.9.1 stays runnable)
#
# Each version has its own folder ops/kafka/lib/VERSION/, so switching back and forth fetches
# nothing again. Supported range and why: ops/kafka/README.md, docs/deploying.md.

# The newest 4.x that passes the whole kafka label here with Debian's librdkafka 2.0.2.
kafka_default_version=4.4.0

kafka_version="${BUBBLEWATCH_KAFKA_VERSION:-$kafka_default_version}"
[[ "$kafka_version" =~ ^([0-9]+)\.([0-9]+)\.[0-9]+$ ]] \
  || die "BUBBLEWATCH_KAFKA_VERSION=$kafka_version is not a Kafka release number (e.g. 4.4.0 or 3.9.1)"
# Kafka 3.x logs through log4j 1 (reload4j), 4.x through log4j2: the backend fetch brings
# (a Maven profile of pom.xml) and the configuration start writes both follow the major version.
case "${BASH_REMATCH[1]}" in
  3) kafka_logging=reload4j ;;
  4) kafka_logging=log4j2 ;;
  *) die "Kafka $kafka_version: only 3.x (log4j 1) and 4.x (log4j2) brokers are known here" ;;
esac
kafka_lib="$here/lib/$kafka_version"
