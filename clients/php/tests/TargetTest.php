<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;

/**
 * Accuracy targets instead of ε: the service runs the query at the smallest ε meeting every
 * target, and refuses, free, one it cannot meet.
 */
final class TargetTest extends TestCase
{
    public function testATargetChoosesTheEpsilonAndTheBarsMeetIt(): void
    {
        $veil = self::client();
        $sql = 'SELECT COUNT(*) AS n FROM people WHERE age >= 33';

        $explained = $veil->explain(self::DATASET, $sql, ['target' => 'n=±50']);
        $result = $veil->query(self::DATASET, $sql, ['target' => ['n=±50']]);

        self::assertStringStartsWith('smallest epsilon meeting every target: ', $explained->notes[0]);
        self::assertSame(self::exactEpsilon($explained->cost), self::exactEpsilon($result->cost));
        self::assertLessThan(1.0, (float) $result->cost->epsilon);
        self::assertLessThanOrEqual(50.0, (float) $result->estimate()->errorBar);
    }

    public function testBadTargetsAreRefusedBeforeAnythingIsSent(): void
    {
        $veil = self::client();
        $before = $veil->remainingBudget(self::DATASET);
        foreach ([['target' => []], ['target' => 'n=±5', 'min_group_size' => 0],
                  ['target' => 'n=±5%', 'references' => [1, 2]]] as $options) {
            try {
                $veil->query(self::DATASET, 'SELECT COUNT(*) AS n FROM people', $options);
                self::fail('refused: ' . json_encode($options));
            } catch (InvalidRequestException $e) {
                self::assertStringContainsString('nothing was sent', $e->getMessage());
            }
        }
        $this->expectException(InvalidRequestException::class);
        $this->expectExceptionMessage('needs a public reference value');
        try {
            $veil->query(self::DATASET, 'SELECT COUNT(*) AS n FROM people', ['target' => 'n=±5%']);
        } finally {
            self::assertSame(
                self::exactEpsilon($before),
                self::exactEpsilon($veil->remainingBudget(self::DATASET)),
            );
        }
    }
}
