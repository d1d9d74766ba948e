//! Produce a few keyed records, then read them back as a member of a consumer group.
//!
//! Run a broker (`moldau server`), then: `cargo run -p client --example quickstart [BROKERS]`.

use std::time::Duration;

use client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ErrorCode, NewTopic, OffsetReset, Producer,
    ProducerConfig, ProducerRecord, RebalanceListener, TopicPartition,
};

/// Prints partitions as they come and go.
struct Log;

impl RebalanceListener for Log {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition]) {
        println!("revoked: {partitions:?}");
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition]) {
        println!("assigned: {partitions:?}");
    }
}

#[tokio::main]
async fn main() -> Result<(), client::Error> {
    let brokers = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    let config = ClientConfig::new(&brokers);

    let admin = Admin::connect(config.clone()).await?;
    match admin.create_topic(NewTopic::new("quickstart", 3)).await {
        Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => {}
        other => other?,
    }

    let producer = Producer::new(ProducerConfig {
        client: config.clone(),
        ..ProducerConfig::default()
    })
    .await?;
    for i in 0..10 {
        let record = ProducerRecord::new("quickstart", format!("event {i}"))
            .key(format!("user-{}", i % 3))
            .header("source", "quickstart");
        let md = producer.send(record).await?;
        println!("sent to partition {} at offset {}", md.partition, md.offset);
    }
    producer.close().await?;

    let mut consumer = Consumer::new(ConsumerConfig {
        client: config,
        group_id: Some("quickstart-readers".into()),
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    })
    .await?;
    consumer.subscribe_with(&["quickstart"], Some(Box::new(Log)))?;
    let mut seen = 0;
    while seen < 10 {
        for r in consumer.poll(Duration::from_secs(1)).await? {
            seen += 1;
            println!(
                "{}-{}@{}: {:?} = {:?}",
                r.topic, r.partition, r.offset, r.key, r.value
            );
        }
    }
    consumer.commit_sync().await?;
    consumer.close().await
}
